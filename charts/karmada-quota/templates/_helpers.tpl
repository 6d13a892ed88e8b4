{{/*
Names, labels, which part renders what, and where the certificate comes from.
*/}}

{{/* Base name of every resource: fullnameOverride, else the chart name (never the release
name, so the two parts of a Karmada install agree on Service and ServiceAccount names). */}}
{{- define "karmada-quota.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "karmada-quota.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "karmada-quota.webhookName" -}}{{ include "karmada-quota.fullname" . }}-webhook{{- end -}}
{{- define "karmada-quota.controllerName" -}}{{ include "karmada-quota.fullname" . }}-controller{{- end -}}
{{- define "karmada-quota.tlsSecretName" -}}
{{- if eq .Values.certs.mode "existingSecret" -}}
{{- required "certs.existingSecret.name is required with certs.mode=existingSecret" .Values.certs.existingSecret.name -}}
{{- else -}}
{{- include "karmada-quota.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{- define "karmada-quota.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "karmada-quota.name" . }}
app.kubernetes.io/instance: {{ include "karmada-quota.fullname" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: karmada-quota
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "webhook"). */}}
{{- define "karmada-quota.selectorLabels" -}}
app.kubernetes.io/name: {{ include "karmada-quota.name" .root }}
app.kubernetes.io/instance: {{ include "karmada-quota.fullname" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "karmada-quota.componentLabels" -}}
{{ include "karmada-quota.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* "true" when this release renders the host part (workloads). */}}
{{- define "karmada-quota.hostPart" -}}
{{- if eq .Values.installMode "standalone" -}}true
{{- else if and (eq .Values.installMode "karmada") (eq .Values.karmada.part "host") -}}true
{{- end -}}
{{- end -}}

{{/* "true" when this release renders the apiserver part (API objects). */}}
{{- /*
The waiting-line labels (webhook.queueing.labelNamespaces): the controller keeps them and
the arrivals review is registered only where they are. "true" or empty.
*/ -}}
{{- define "karmada-quota.lineLabels" -}}
{{- if and .Values.webhook.queueing.enabled .Values.webhook.queueing.labelNamespaces -}}
{{- if .Values.controller.watchNamespace -}}
{{- fail "webhook.queueing.labelNamespaces needs a controller that sees every quota: unset controller.watchNamespace, or set webhook.queueing.labelNamespaces=false" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{- define "karmada-quota.apiserverPart" -}}
{{- if eq .Values.installMode "standalone" -}}true
{{- else if and (eq .Values.installMode "karmada") (eq .Values.karmada.part "apiserver") -}}true
{{- end -}}
{{- end -}}

{{- define "karmada-quota.karmadaMode" -}}
{{- if eq .Values.installMode "karmada" -}}true{{- end -}}
{{- end -}}

{{/* Namespace of the host part. */}}
{{- define "karmada-quota.hostNamespace" -}}
{{- default .Release.Namespace .Values.karmada.hostNamespace -}}
{{- end -}}

{{/* Namespace of the reservation batches (KarmadaQuotaReservation) in the karmada-apiserver. */}}
{{- define "karmada-quota.reservationNamespace" -}}
{{- default .Release.Namespace .Values.reservationNamespace -}}
{{- end -}}

{{/* The reservation batches' namespace of both binaries, as env (reservationNamespace). */}}
{{- define "karmada-quota.reservationEnv" -}}
# Where the reservation batches live; both binaries must agree.
- name: KQ_RESERVATION_NAMESPACE
  value: {{ include "karmada-quota.reservationNamespace" . | quote }}
{{- end -}}

{{/* Base URL the apiserver calls. */}}
{{- define "karmada-quota.webhookURL" -}}
{{- if .Values.webhook.url -}}
{{- .Values.webhook.url | trimSuffix "/" -}}
{{- else -}}
https://{{ include "karmada-quota.webhookName" . }}.{{ include "karmada-quota.hostNamespace" . }}.svc:{{ .Values.webhook.service.port }}
{{- end -}}
{{- end -}}

{{/* <repository>:<tag>, pinned by @<digest> when image.digest is set. */}}
{{- define "karmada-quota.image" -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end -}}

{{/* The kubeconfig Secret of a component: (dict "root" $ "component" .Values.webhook
"name" "webhook"): its own override, else karmada.kubeconfigSecret.name, else the
component's own `<fullname>-<name>-kubeconfig` (least privilege: one identity each). */}}
{{- define "karmada-quota.kubeconfigSecretName" -}}
{{- $own := printf "%s-%s-kubeconfig" (include "karmada-quota.fullname" .root) .name -}}
{{- default (default $own .root.Values.karmada.kubeconfigSecret.name) .component.kubeconfigSecret.name -}}
{{- end -}}
{{- define "karmada-quota.kubeconfigSecretKey" -}}
{{- default .root.Values.karmada.kubeconfigSecret.key .component.kubeconfigSecret.key -}}
{{- end -}}

{{/* Where the binaries find mounted files. */}}
{{- define "karmada-quota.kubeconfigDir" -}}/etc/karmada-quota/kubeconfig{{- end -}}
{{- define "karmada-quota.tlsDir" -}}/etc/karmada-quota/tls{{- end -}}

{{/* DNS names of the webhook Service. */}}
{{- define "karmada-quota.serviceDNSNames" -}}
{{- $svc := include "karmada-quota.webhookName" . -}}
{{- $ns := include "karmada-quota.hostNamespace" . -}}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) -}}
{{- concat $names .Values.certs.extraDNSNames | toJson -}}
{{- end -}}

{{/*
certs.mode=auto: a CA and a serving certificate, generated once per render and kept in
.Values (templates render separately but share it), or the existing Secret's when an
earlier install made one (lookup; empty under helm template/lint). Returns JSON
{ca, crt, key}.
*/}}
{{- define "karmada-quota.autoCerts" -}}
{{- if not (hasKey .Values "kqGeneratedCerts") -}}
{{- $existing := lookup "v1" "Secret" (include "karmada-quota.hostNamespace" .) (include "karmada-quota.tlsSecretName" .) -}}
{{- $data := default (dict) (get (default (dict) $existing) "data") -}}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") -}}
{{- $_ := set .Values "kqGeneratedCerts" (dict "ca" (index $data "ca.crt" | b64dec) "crt" (index $data "tls.crt" | b64dec) "key" (index $data "tls.key" | b64dec)) -}}
{{- else -}}
{{- $days := int .Values.certs.auto.validityDays -}}
{{- $ca := genCA (printf "%s-ca" (include "karmada-quota.fullname" .)) $days -}}
{{- $dns := include "karmada-quota.serviceDNSNames" . | fromJsonArray -}}
{{- $cert := genSignedCert (include "karmada-quota.webhookName" .) .Values.certs.extraIPs $dns $days $ca -}}
{{- $_ := set .Values "kqGeneratedCerts" (dict "ca" $ca.Cert "crt" $cert.Cert "key" $cert.Key) -}}
{{- end -}}
{{- end -}}
{{- .Values.kqGeneratedCerts | toJson -}}
{{- end -}}

{{/*
The caBundle (base64 PEM) of the webhook configuration, or fail with what to set.
*/}}
{{- define "karmada-quota.caBundle" -}}
{{- $mode := .Values.certs.mode -}}
{{- if .Values.certs.caBundle -}}
{{- .Values.certs.caBundle | b64enc -}}
{{- else if eq $mode "custom" -}}
{{- required "certs.custom.caCert is required with certs.mode=custom" .Values.certs.custom.caCert | b64enc -}}
{{- else if eq .Values.installMode "karmada" -}}
{{- fail (printf "certs.caBundle is required by the apiserver part with certs.mode=%s: the karmada-apiserver cannot read the host's Secret. Pass the host part's CA, e.g. --set-file certs.caBundle=ca.crt after `kubectl -n %s get secret %s -o jsonpath='{.data.ca\\.crt}' | base64 -d > ca.crt`" $mode (include "karmada-quota.hostNamespace" .) (include "karmada-quota.tlsSecretName" .)) -}}
{{- else if eq $mode "auto" -}}
{{- (include "karmada-quota.autoCerts" . | fromJson).ca | b64enc -}}
{{- else -}}
{{- /* standalone, existingSecret or certManager: the Secret's ca.crt when it exists. */ -}}
{{- $secret := lookup "v1" "Secret" (include "karmada-quota.hostNamespace" .) (include "karmada-quota.tlsSecretName" .) -}}
{{- $data := default (dict) (get (default (dict) $secret) "data") -}}
{{- if hasKey $data "ca.crt" -}}
{{- index $data "ca.crt" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Pod-level scheduling and security shared by both Deployments: (dict "root" $ "component" "webhook"). */}}
{{- define "karmada-quota.podCommon" -}}
{{- $root := .root -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $root.Values.affinity }}
affinity:
  {{- toYaml $root.Values.affinity | nindent 2 }}
{{- else if eq $root.Values.podAntiAffinity "soft" }}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "karmada-quota.selectorLabels" (dict "root" $root "component" .component) | nindent 14 }}
{{- end }}
{{- with $root.Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  - {{- toYaml (omit . "labelSelector") | nindent 4 }}
    labelSelector:
      {{- if .labelSelector }}
      {{- toYaml .labelSelector | nindent 6 }}
      {{- else }}
      matchLabels:
        {{- include "karmada-quota.selectorLabels" (dict "root" $root "component" $.component) | nindent 8 }}
      {{- end }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The PodDisruptionBudget apiVersion: policy/v1 when the cluster serves it, or, on an
offline render (helm template: helm's API list lacks it), when --kube-version is 1.21 or
later, the release that made policy/v1 GA; else policy/v1beta1. */}}
{{- define "karmada-quota.pdbApiVersion" -}}
{{- if or (.Capabilities.APIVersions.Has "policy/v1/PodDisruptionBudget") (semverCompare ">=1.21.0-0" .Capabilities.KubeVersion.Version) -}}policy/v1
{{- else -}}policy/v1beta1
{{- end -}}
{{- end -}}

{{/*
Client authentication of the webhook's callers (webhook.clientAuth): the Secret holding
the apiserver's client certificate (ca.crt: the CA the webhook trusts; tls.crt, tls.key:
what the apiserver presents).
*/}}
{{- define "karmada-quota.clientSecretName" -}}
{{- if .Values.webhook.clientAuth.caBundle -}}
{{- include "karmada-quota.fullname" . }}-apiserver-client-ca
{{- else if eq .Values.certs.mode "existingSecret" -}}
{{- required "certs.existingSecret.clientSecretName is required with certs.mode=existingSecret and webhook.clientAuth.enabled (a Secret with ca.crt, tls.crt, tls.key of the apiserver's client certificate), or set webhook.clientAuth.enabled=false" .Values.certs.existingSecret.clientSecretName -}}
{{- else -}}
{{- include "karmada-quota.fullname" . }}-apiserver-client
{{- end -}}
{{- end -}}

{{- define "karmada-quota.clientCommonName" -}}
{{- default (printf "%s-apiserver" (include "karmada-quota.fullname" .)) .Values.webhook.clientAuth.commonName -}}
{{- end -}}

{{/* --client-allowed-names: the values, else the issued certificate's CN (auto,
certManager), else nothing. */}}
{{- define "karmada-quota.clientAllowedNames" -}}
{{- if .Values.webhook.clientAuth.allowedNames -}}
{{- join "," .Values.webhook.clientAuth.allowedNames -}}
{{- else if and (not .Values.webhook.clientAuth.caBundle) (has .Values.certs.mode (list "auto" "certManager")) -}}
{{- include "karmada-quota.clientCommonName" . -}}
{{- end -}}
{{- end -}}

{{/*
certs.mode=auto: a client CA and the apiserver's client certificate, generated once per
render or read back from the existing client Secret (lookup). JSON {ca, crt, key}.
*/}}
{{- define "karmada-quota.autoClientCerts" -}}
{{- if not (hasKey .Values "kqGeneratedClientCerts") -}}
{{- $existing := lookup "v1" "Secret" (include "karmada-quota.hostNamespace" .) (include "karmada-quota.clientSecretName" .) -}}
{{- $data := default (dict) (get (default (dict) $existing) "data") -}}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") -}}
{{- $_ := set .Values "kqGeneratedClientCerts" (dict "ca" (index $data "ca.crt" | b64dec) "crt" (index $data "tls.crt" | b64dec) "key" (index $data "tls.key" | b64dec)) -}}
{{- else -}}
{{- $days := int .Values.certs.auto.validityDays -}}
{{- $ca := genCA (printf "%s-client-ca" (include "karmada-quota.fullname" .)) $days -}}
{{- $cn := include "karmada-quota.clientCommonName" . -}}
{{- $cert := genSignedCert $cn nil (list $cn) $days $ca -}}
{{- $_ := set .Values "kqGeneratedClientCerts" (dict "ca" $ca.Cert "crt" $cert.Cert "key" $cert.Key) -}}
{{- end -}}
{{- end -}}
{{- .Values.kqGeneratedClientCerts | toJson -}}
{{- end -}}

{{/* host[:port] of the webhook URL: the user entry the apiserver's kubeconfig needs. */}}
{{- define "karmada-quota.webhookHostPort" -}}
{{- $u := urlParse (include "karmada-quota.webhookURL" .) -}}
{{- $u.host -}}
{{- end -}}

{{/* Where the webhook finds the client CA. */}}
{{- define "karmada-quota.clientCaDir" -}}/etc/karmada-quota/client-ca{{- end -}}
{{- define "karmada-quota.dashboardTlsDir" -}}/etc/karmada-quota/dashboard-tls{{- end -}}

{{/* true when the listen host is a loopback address. */}}
{{- define "karmada-quota.loopbackListen" -}}
{{- $h := .Values.listenHost | trimPrefix "[" | trimSuffix "]" -}}
{{- if or (hasPrefix "127." $h) (eq $h "::1") (eq $h "localhost") -}}true{{- end -}}
{{- end -}}

{{/* The listener bound flags both binaries take (listenerLimits). */}}
{{- define "karmada-quota.listenerLimitArgs" -}}
{{- with .Values.listenerLimits.maxConnections }}
- --max-connections={{ . }}
{{- end }}
{{- with .Values.listenerLimits.headerReadTimeout }}
- --header-read-timeout={{ . }}
{{- end }}
{{- with .Values.listenerLimits.bodyReadTimeout }}
- --body-read-timeout={{ . }}
{{- end }}
{{- with .Values.listenerLimits.tlsHandshakeTimeout }}
- --tls-handshake-timeout={{ . }}
{{- end }}
{{- with .Values.listenerLimits.maxPendingConnections }}
- --max-pending-connections={{ . }}
{{- end }}
{{- with .Values.listenerLimits.maxConnectionsPerPeer }}
- --max-connections-per-peer={{ . }}
{{- end }}
{{- end -}}

{{/* Whether the dashboard runs as a Deployment and identity of its own (--role=dashboard). */}}
{{- define "karmada-quota.dashboardSeparate" -}}
{{- if .Values.dashboard.separate }}true{{ end -}}
{{- end -}}

{{/* The component whose pods serve the dashboard: `dashboard` or `controller`. */}}
{{- define "karmada-quota.dashboardComponent" -}}
{{- if include "karmada-quota.dashboardSeparate" . }}dashboard{{ else }}controller{{ end -}}
{{- end -}}

{{/* The components with a ServiceAccount, a kubeconfig and RBAC of their own. */}}
{{- define "karmada-quota.components" -}}
{{- if include "karmada-quota.dashboardSeparate" . }}webhook controller dashboard{{ else }}webhook controller{{ end -}}
{{- end -}}

{{/* The render checks and the container flags of whoever serves the dashboard. */}}
{{- define "karmada-quota.dashboardArgs" -}}
{{- $dash := .Values.dashboard -}}
{{- if and (eq $dash.auth "none") (not (include "karmada-quota.loopbackListen" .)) (not $dash.allowUnauthenticatedRemote) }}
{{- fail (printf "dashboard.auth=none on %s would show every quota to anyone who reaches the dashboard port: use dashboard.auth=kubernetes, or set dashboard.allowUnauthenticatedRemote=true to accept that" .Values.listenHost) }}
{{- end }}
{{- if and $dash.tls.enabled (not $dash.tls.secretName) }}
{{- fail "dashboard.tls.enabled needs dashboard.tls.secretName (a kubernetes.io/tls Secret in the release namespace)" }}
{{- end -}}
- --dashboard-listen={{ .Values.listenHost }}:{{ $dash.port }}
- --dashboard-auth={{ $dash.auth }}
{{- if $dash.allowUnauthenticatedRemote }}
- --dashboard-allow-unauthenticated-remote=true
{{- end }}
{{- with $dash.tokenAudiences }}
- --dashboard-token-audiences={{ join "," . }}
{{- end }}
{{- if $dash.tls.enabled }}
- --dashboard-tls-cert-file={{ include "karmada-quota.dashboardTlsDir" . }}/tls.crt
- --dashboard-tls-private-key-file={{ include "karmada-quota.dashboardTlsDir" . }}/tls.key
{{- end }}
{{- with $dash.prometheusUrl }}
- --dashboard-prometheus={{ . }}
{{- end }}
{{- with $dash.history }}
{{- with .window }}
- --history-window={{ . }}
{{- end }}
{{- with .step }}
- --history-step={{ . }}
{{- end }}
{{- with .maxQuotas }}
- --history-max-quotas={{ . }}
{{- end }}
{{- end }}
{{- include "karmada-quota.prometheusArgs" . }}
{{- end -}}

{{/*
dashboard.prometheus: TLS and credentials for dashboard.prometheusUrl, from a Secret and a
ConfigMap the operator creates in the release namespace, mounted read-only (only the keys
named) under prometheusDir; the --prometheus-* flags name the mounted files.
*/}}
{{- define "karmada-quota.prometheusDir" -}}/etc/karmada-quota/prometheus{{- end -}}

{{/* Render checks; "true" when a Secret or a ConfigMap is mounted. */}}
{{- define "karmada-quota.prometheusMounted" -}}
{{- $p := .Values.dashboard.prometheus -}}
{{- $s := $p.secret -}}
{{- $c := $p.configMap -}}
{{- $secretKeys := list $s.bearerTokenKey $s.basicAuthPasswordKey $s.certKey $s.keyKey $s.caKey | compact -}}
{{- if and $secretKeys (not $s.name) }}
{{- fail "dashboard.prometheus.secret names keys but no Secret: set dashboard.prometheus.secret.name" }}
{{- end -}}
{{- if and $s.name (not $secretKeys) }}
{{- fail (printf "dashboard.prometheus.secret.name=%s mounts nothing: name its keys (bearerTokenKey, basicAuthPasswordKey, certKey and keyKey, caKey)" $s.name) }}
{{- end -}}
{{- if ne (empty $c.name) (empty $c.caKey) }}
{{- fail "dashboard.prometheus.configMap needs both name and caKey" }}
{{- end -}}
{{- if and $s.caKey $c.caKey }}
{{- fail "the Prometheus CA comes from dashboard.prometheus.secret.caKey or configMap.caKey, not both" }}
{{- end -}}
{{- if ne (empty $s.certKey) (empty $s.keyKey) }}
{{- fail "a Prometheus client certificate needs both dashboard.prometheus.secret.certKey and keyKey" }}
{{- end -}}
{{- if ne (empty $p.basicAuthUser) (empty $s.basicAuthPasswordKey) }}
{{- fail "Prometheus basic auth needs both dashboard.prometheus.basicAuthUser and secret.basicAuthPasswordKey" }}
{{- end -}}
{{- if and $s.bearerTokenKey $p.basicAuthUser }}
{{- fail "dashboard.prometheus: a bearer token and basic auth are two kinds of credentials: give one" }}
{{- end -}}
{{- if and (or $s.name $c.name $p.basicAuthUser $p.headers) (not .Values.dashboard.prometheusUrl) }}
{{- fail "dashboard.prometheus sets how to reach Prometheus but dashboard.prometheusUrl is empty" }}
{{- end -}}
{{- if or $s.name $c.name }}true{{ end -}}
{{- end -}}

{{/* The --prometheus-* flags (lines of args). */}}
{{- define "karmada-quota.prometheusArgs" -}}
{{- $p := .Values.dashboard.prometheus -}}
{{- $s := $p.secret -}}
{{- $dir := include "karmada-quota.prometheusDir" . -}}
{{- $_ := include "karmada-quota.prometheusMounted" . -}}
{{- with $s.bearerTokenKey }}
- --prometheus-bearer-token-file={{ $dir }}/secret/{{ . }}
{{- end }}
{{- with $p.basicAuthUser }}
- --prometheus-basic-auth-user={{ . }}
- --prometheus-basic-auth-password-file={{ $dir }}/secret/{{ $s.basicAuthPasswordKey }}
{{- end }}
{{- with $s.certKey }}
- --prometheus-cert-file={{ $dir }}/secret/{{ . }}
- --prometheus-key-file={{ $dir }}/secret/{{ $s.keyKey }}
{{- end }}
{{- with $s.caKey }}
- --prometheus-ca-file={{ $dir }}/secret/{{ . }}
{{- end }}
{{- with $p.configMap.caKey }}
- --prometheus-ca-file={{ $dir }}/configmap/{{ . }}
{{- end }}
{{- range $p.headers }}
- --prometheus-header={{ . }}
{{- end }}
{{- end -}}

{{/* The container's volumeMounts for dashboard.prometheus (indented as list items). */}}
{{- define "karmada-quota.prometheusMounts" -}}
{{- $p := .Values.dashboard.prometheus -}}
{{- $dir := include "karmada-quota.prometheusDir" . -}}
{{- if $p.secret.name }}
- name: prometheus-secret
  mountPath: {{ $dir }}/secret
  readOnly: true
{{- end }}
{{- if $p.configMap.name }}
- name: prometheus-configmap
  mountPath: {{ $dir }}/configmap
  readOnly: true
{{- end }}
{{- end -}}

{{/* The pod's volumes for dashboard.prometheus: only the keys named are projected. */}}
{{- define "karmada-quota.prometheusVolumes" -}}
{{- $p := .Values.dashboard.prometheus -}}
{{- $s := $p.secret -}}
{{- if $s.name }}
- name: prometheus-secret
  secret:
    secretName: {{ $s.name }}
    items:
      {{- range list $s.bearerTokenKey $s.basicAuthPasswordKey $s.certKey $s.keyKey $s.caKey | compact | uniq }}
      - {key: {{ . | quote }}, path: {{ . | quote }}}
      {{- end }}
{{- end }}
{{- with $p.configMap.name }}
- name: prometheus-configmap
  configMap:
    name: {{ . }}
    items:
      - {key: {{ $p.configMap.caKey | quote }}, path: {{ $p.configMap.caKey | quote }}}
{{- end }}
{{- end -}}

{{/* The RBAC rules serving the dashboard needs, whoever serves it (indented as rules). */}}
{{- define "karmada-quota.dashboardRules" }}
  # The dashboard's feed of the quotas' Warning events (field selector
  # involvedObject.kind=KarmadaQuota,type=Warning).
  - apiGroups: [""]
    resources: ["events"]
    verbs: ["list", "watch"]
  {{- if eq .Values.dashboard.auth "kubernetes" }}
  # dashboard.auth=kubernetes: who a viewer's bearer token is (TokenReview), and whether
  # they may list KarmadaQuotas in a namespace (SubjectAccessReview).
  - apiGroups: ["authentication.k8s.io"]
    resources: ["tokenreviews"]
    verbs: ["create"]
  - apiGroups: ["authorization.k8s.io"]
    resources: ["subjectaccessreviews"]
    verbs: ["create"]
  {{- end }}
{{- end }}

{{/* The webhook's quota administrators (webhook.quotaAdmins): who may create, delete or
change the spec of quota objects. Empty lists render empty flags (no one). */}}
{{- define "karmada-quota.quotaAdminArgs" -}}
- --quota-admin-groups={{ join "," .Values.webhook.quotaAdmins.groups }}
- --quota-admin-users={{ join "," .Values.webhook.quotaAdmins.users }}
{{- $releasers := .Values.webhook.queueing.releasers }}
{{- if not $releasers }}
{{- $releasers = list (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "karmada-quota.controllerName" .)) }}
{{- end }}
- --queue-releasers={{ join "," $releasers }}
{{- end -}}

{{/*
"true" where the webhooks' matchConditions are rendered: asked for
(webhook.matchConditions.enabled) and served by the apiserver rendered for (1.28+, beta
and on by default; GA in 1.30). An older apiserver refuses the field.
*/}}
{{- define "karmada-quota.matchConditions" -}}
{{- if and .Values.webhook.matchConditions.enabled (semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version) -}}true{{- end -}}
{{- end -}}

{{/*
"true" where CRDs carry their x-kubernetes-validations (CEL) rules: the apiserver
rendered for evaluates them (1.25+, beta and on by default; GA in 1.29). Older ones do not
know the field, and kubectl's client-side schema check refuses it there.
*/}}
{{- define "karmada-quota.crdValidationRules" -}}
{{- if semverCompare ">=1.25.0-0" .Capabilities.KubeVersion.Version -}}true{{- end -}}
{{- end -}}

{{/*
Remove every x-kubernetes-validations key from the map or list `.`, in place, at any depth.
*/}}
{{- define "karmada-quota.dropValidationRules" -}}
{{- if kindIs "map" . -}}
{{- $_ := unset . "x-kubernetes-validations" -}}
{{- range $k, $v := . -}}{{- include "karmada-quota.dropValidationRules" $v -}}{{- end -}}
{{- else if kindIs "slice" . -}}
{{- range . -}}{{- include "karmada-quota.dropValidationRules" . -}}{{- end -}}
{{- end -}}
{{- end -}}
