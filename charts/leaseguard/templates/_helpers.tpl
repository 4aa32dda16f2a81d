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
(leaseguard manifests --leaseguard-namespace ...): replaced by the release namespace,
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
rendering `make chart` committed for the coalescing mode (leaseguard.coalescing). */}}
{{- define "leaseguard.webhookConfigurations" -}}
{{- if .Values.webhookConfigurations -}}
{{- .Values.webhookConfigurations -}}
{{- else -}}
{{- if and .Values.policy (ne (sha256sum .Values.policy) (sha256sum (.Files.Get "files/policy.yaml"))) -}}
{{- fail "policy is not the chart's default policy, and webhookConfigurations is empty: the webhook configurations must select what the policy selects. Render them with `leaseguard manifests --config your-policy.yaml --leaseguard-namespace <release namespace> --coalesce <mode>` and pass the output: --set-file webhookConfigurations=webhooks.yaml (charts/leaseguard/README.md)" -}}
{{- end -}}
{{- .Files.Get (printf "files/webhooks-coalesce-%s.yaml" (include "leaseguard.coalescing" .)) -}}
{{- end -}}
{{- end -}}

{{/* The API the coalescing policy needs: admissionregistration.k8s.io/v1
MutatingAdmissionPolicy, served from Kubernetes 1.36. Helm asks the cluster's
discovery (helm install and upgrade, helm template --validate); plain `helm
template` knows only what --api-versions names. */}}
{{- define "leaseguard.mutatingAdmissionPolicyAPI" -}}
admissionregistration.k8s.io/v1/MutatingAdmissionPolicy
{{- end -}}

{{/* "true" when the cluster serves the coalescing policy's API, else empty. */}}
{{- define "leaseguard.servesMutatingAdmissionPolicy" -}}
{{- if .Capabilities.APIVersions.Has (include "leaseguard.mutatingAdmissionPolicyAPI" .) -}}
true
{{- end -}}
{{- end -}}

{{/* The coalescing mode the chart renders, checked: .Values.coalescing, with
auto resolved to policy where the cluster serves MutatingAdmissionPolicy and
to webhook elsewhere. An explicit policy where it is not served fails here
rather than in the API server, halfway through the install. */}}
{{- define "leaseguard.coalescing" -}}
{{- $c := .Values.coalescing -}}
{{- $served := include "leaseguard.servesMutatingAdmissionPolicy" . -}}
{{- if not (has $c (list "auto" "policy" "webhook" "off")) -}}
{{- fail (printf "coalescing %q: want auto, policy, webhook or off" $c) -}}
{{- end -}}
{{- if eq $c "auto" -}}
{{- $c = ternary "policy" "webhook" (eq $served "true") -}}
{{- else if and (eq $c "policy") (ne $served "true") -}}
{{- fail (printf "coalescing: policy renders a MutatingAdmissionPolicy, and this cluster does not serve %s (Kubernetes 1.36 and later): set coalescing to auto or webhook (leaseguard's mutating webhook coalesces early renewals) or off (renewals stored as they come). helm template without a cluster: pass --api-versions %s for a cluster that serves it" (include "leaseguard.mutatingAdmissionPolicyAPI" .) (include "leaseguard.mutatingAdmissionPolicyAPI" .)) -}}
{{- end -}}
{{- $c -}}
{{- end -}}
