{{- define "trainer.name" -}}
{{- .Values.fullnameOverride | default (printf "%s-trainer" .Values.job) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "trainer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trainer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trainer.labels" -}}
{{ include "trainer.selectorLabels" . }}
app.kubernetes.io/component: trainer
app.kubernetes.io/part-of: edl
app.kubernetes.io/managed-by: {{ .Release.Service }}
edl.paddlepaddle.org/job: {{ .Values.job }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* "true" when checkpoints go to the chart's volume (on, and no object-storage url). */}}
{{- define "trainer.checkpointVolume" -}}
{{- if and .Values.checkpoints.enabled (not .Values.checkpoints.url) -}}true{{- end -}}
{{- end -}}

{{/* The gang's Workload: its spec is immutable, so a new workers.min is a new Workload. */}}
{{- define "trainer.workload" -}}
{{- printf "%s-min%d" (include "trainer.name" .) (int .Values.workers.min) -}}
{{- end -}}

{{- define "trainer.validate" -}}
{{- if and .Values.gang.enabled (not (semverCompare "~1.35.0-0" .Capabilities.KubeVersion.Version)) -}}
{{- fail (printf "gang.enabled: Kubernetes %s has no scheduling.k8s.io/v1alpha1 Workload with pod spec.workloadRef (only 1.35 has it; 1.36 replaced it): set gang.enabled=false" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" (toString .Values.job)) -}}
{{- fail (printf "job %q: must be a DNS label (lower case letters, digits, '-')" (toString .Values.job)) -}}
{{- end -}}
{{- if not (has .Values.onFinished (list "scaleToZero" "idle" "exit")) -}}
{{- fail (printf "onFinished %q: expected scaleToZero, idle or exit" .Values.onFinished) -}}
{{- end -}}
{{- if not (has .Values.autoscaling.mode (list "sizing" "sizingObject" "throughput" "none")) -}}
{{- fail (printf "autoscaling.mode %q: expected sizing, sizingObject, throughput or none" .Values.autoscaling.mode) -}}
{{- end -}}
{{- if and .Values.dataset.enabled (not .Values.dataset.volume) -}}
{{- fail "dataset.enabled needs dataset.volume: a volume source, e.g. {persistentVolumeClaim: {claimName: NAME, readOnly: true}}" -}}
{{- end -}}
{{- if gt (int .Values.workers.min) (int .Values.workers.max) -}}
{{- fail (printf "workers.min %v is above workers.max %v" .Values.workers.min .Values.workers.max) -}}
{{- end -}}
{{- end -}}
