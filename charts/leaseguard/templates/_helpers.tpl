{{/*
Object names are fixed, as in config/: the webhook configurations are
cluster-scoped and named by `leaseguard manifests` (--prefix leaseguard),
leaseguard's self-managed mode keeps the caBundle of exactly those two
current, and one leaseguard guards a cluster's leases. Only the namespace
comes from the release.
*/}}

{{/* Labels every object carries: config/'s, plus Helm's own. */}}
{{- define "leaseguard.labels" -}}
app.kubernetes.io/name: leaseguard
app.kubernetes.io/part-of: leaseguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The pods' labels and the selector of the Deployment, Services, PDB,
NetworkPolicy: exactly config/manager's (a Deployment's selector is
immutable, so they never change across upgrades). */}}
{{- define "leaseguard.selectorLabels" -}}
app.kubernetes.io/name: leaseguard
app.kubernetes.io/component: webhook
{{- end -}}

{{/* The placeholder `make chart` renders the webhook configurations with
(leaseguard manifests --namespace ...): replaced by the release namespace,
which makes them exactly what the generator renders for that namespace. */}}
{{- define "leaseguard.namespacePlaceholder" -}}
zz-leaseguard-release-namespace
{{- end -}}

{{/* The certificate mode, checked. */}}
{{- define "leaseguard.certMode" -}}
{{- $m := .Values.certificates.mode -}}
{{- if not (has $m (list "certManager" "selfManaged")) -}}
{{- fail (printf "certificates.mode %q: want certManager or selfManaged" $m) -}}
{{- end -}}
{{- $m -}}
{{- end -}}

{{/* The policy the ConfigMap holds: .Values.policy, or the chart's default
(files/policy.yaml, a copy of config/manager/policy.yaml). */}}
{{- define "leaseguard.policy" -}}
{{- if .Values.policy -}}
{{- .Values.policy -}}
{{- else -}}
{{- .Files.Get "files/policy.yaml" -}}
{{- end -}}
{{- end -}}

{{/* The admission configuration: `leaseguard manifests` output for the
policy, either .Values.webhookConfigurations or, for the default policy, the
rendering `make chart` committed for .Values.coalescing. */}}
{{- define "leaseguard.webhookConfigurations" -}}
{{- if .Values.webhookConfigurations -}}
{{- .Values.webhookConfigurations -}}
{{- else -}}
{{- if and .Values.policy (ne (sha256sum .Values.policy) (sha256sum (.Files.Get "files/policy.yaml"))) -}}
{{- fail "policy is not the chart's default policy, and webhookConfigurations is empty: the webhook configurations must select what the policy selects. Render them with `leaseguard manifests --config your-policy.yaml --namespace <release namespace> --coalesce <mode>` and pass the output: --set-file webhookConfigurations=webhooks.yaml (charts/leaseguard/README.md)" -}}
{{- end -}}
{{- $c := .Values.coalescing -}}
{{- if not (has $c (list "policy" "webhook" "off")) -}}
{{- fail (printf "coalescing %q: want policy, webhook or off" $c) -}}
{{- end -}}
{{- .Files.Get (printf "files/webhooks-coalesce-%s.yaml" $c) -}}
{{- end -}}
{{- end -}}
