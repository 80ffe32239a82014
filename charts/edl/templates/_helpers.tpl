{{/* The adapter's name: its Deployment, Service, ServiceAccount and ClusterRoles. */}}
{{- define "edl.fullname" -}}
{{- .Values.fullnameOverride | default "edl-metrics-adapter" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "edl.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "edl.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{- define "edl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "edl.fullname" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "edl.labels" -}}
{{ include "edl.selectorLabels" . }}
app.kubernetes.io/part-of: edl
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The APIServices this release serves: name -> group, version, versionPriority. */}}
{{- define "edl.apiServices" -}}
{{- $all := list -}}
{{- if .Values.apiServices.customV1beta2 -}}{{- $all = append $all (list "v1beta2.custom.metrics.k8s.io" "custom.metrics.k8s.io" "v1beta2" 200) -}}{{- end -}}
{{- if .Values.apiServices.customV1beta1 -}}{{- $all = append $all (list "v1beta1.custom.metrics.k8s.io" "custom.metrics.k8s.io" "v1beta1" 100) -}}{{- end -}}
{{- if .Values.apiServices.externalV1beta1 -}}{{- $all = append $all (list "v1beta1.external.metrics.k8s.io" "external.metrics.k8s.io" "v1beta1" 100) -}}{{- end -}}
{{- toJson $all -}}
{{- end -}}

{{- /*
Whether Helm reaches a cluster: `lookup` finds the core group's APIService ("v1.", which every
kube-apiserver registers) on install, upgrade and --dry-run=server; under `helm template`,
`helm lint`, a client dry-run or Argo CD's rendering it finds nothing.
*/ -}}
{{- define "edl.clusterReachable" -}}
{{- if lookup "apiregistration.k8s.io/v1" "APIService" "" "v1." -}}true{{- end -}}
{{- end -}}

{{- /*
The TLS mode in effect. auto: generate where Helm reaches the cluster (the CA is looked up and
kept across upgrades), certManager where it does not, so a GitOps render never mints a new CA.
generate without a cluster refuses: every render would make a different CA.
*/ -}}
{{- define "edl.tlsMode" -}}
{{- $mode := .Values.tls.mode -}}
{{- $reachable := eq (include "edl.clusterReachable" .) "true" -}}
{{- if eq $mode "auto" -}}
{{- $mode = ternary "generate" "certManager" $reachable -}}
{{- else if and (eq $mode "generate") (not $reachable) -}}
{{- fail "tls.mode=generate needs the cluster (helm install/upgrade) to keep its CA; rendered without one (helm template, Argo CD, lint) it would mint a new CA each time: set tls.mode=auto, certManager, or existingSecret (with tls.existingSecret.name and tls.existingSecret.caBundle)" -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{- define "edl.tlsSecretName" -}}
{{- if eq .Values.tls.mode "existingSecret" -}}
{{- required "tls.existingSecret.name is required with tls.mode=existingSecret" .Values.tls.existingSecret.name -}}
{{- else -}}
{{- printf "%s-tls" (include "edl.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "edl.validate" -}}
{{- $modes := list "auto" "generate" "certManager" "existingSecret" "selfSigned" -}}
{{- if not (has .Values.tls.mode $modes) -}}
{{- fail (printf "tls.mode %q: expected one of %s" .Values.tls.mode (join ", " $modes)) -}}
{{- end -}}
{{- if and (eq .Values.tls.mode "existingSecret") (not .Values.tls.existingSecret.caBundle) -}}
{{- fail "tls.existingSecret.caBundle is required with tls.mode=existingSecret (base64 PEM of the CA)" -}}
{{- end -}}
{{- end -}}
