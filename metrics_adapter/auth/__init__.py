"""Authentication and authorization of an aggregated API server.

As Kubernetes asks of an extension API server (kubernetes.io, "Configure the Aggregation Layer",
and k8s.io/apiserver `pkg/server/options/authentication.go`): mTLS from the aggregator with the
front-proxy client certificate, verified against the requestheader CA and allowed names before
`X-Remote-*` headers are trusted; bearer tokens via TokenReview; every request authorised by
SubjectAccessReview.
"""
