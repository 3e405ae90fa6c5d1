{{- define "regroup.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* <release>-<name> (as in chart 0.1), or fullnameOverride as given. */}}
{{- define "regroup.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "regroup.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The migration Job's name: it becomes a pod label (job-name), so at most 63 characters. */}}
{{- define "regroup.migrateName" -}}
{{- printf "%s-migrate" (include "regroup.fullname" . | trunc 55 | trimSuffix "-") -}}
{{- end -}}

{{/* The headless Service's name: a Service name is a DNS label, at most 63 characters. */}}
{{- define "regroup.headlessName" -}}
{{- printf "%s-headless" (include "regroup.fullname" . | trunc 54 | trimSuffix "-") -}}
{{- end -}}

{{/*
Labels. Called with (dict "ctx" $ "component" "server"|"migrate"): the server and the
migration Job differ by app.kubernetes.io/component, which the Service and the
Deployment select on, so that neither ever selects a migration pod.
*/}}
{{- define "regroup.selectorLabels" -}}
app.kubernetes.io/name: {{ include "regroup.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
The recommended app.kubernetes.io labels; pods get these (no helm.sh/chart, so that a chart
bump alone restarts nothing), then podLabels, then commonLabels. Neither may replace the
chart's labels, which the selectors depend on (merge keeps the first dict's keys), and
neither ever enters a selector: a Deployment's selector cannot change.
*/}}
{{- define "regroup.podLabels" -}}
{{- $labels := include "regroup.selectorLabels" . | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/version" (.ctx.Chart.AppVersion | toString) -}}
{{- $_ := set $labels "app.kubernetes.io/part-of" "regroup" -}}
{{- $_ := set $labels "app.kubernetes.io/managed-by" .ctx.Release.Service -}}
{{- toYaml (merge $labels (.ctx.Values.podLabels | default dict) (.ctx.Values.commonLabels | default dict)) -}}
{{- end -}}

{{/*
Every object's labels: the recommended ones and helm.sh/chart, then the object's own extra
labels (.extra, such as a ServiceMonitor's labels), then commonLabels; the chart's win, as
for the pods.
*/}}
{{- define "regroup.labels" -}}
{{- $labels := include "regroup.selectorLabels" . | fromYaml -}}
{{- $_ := set $labels "app.kubernetes.io/version" (.ctx.Chart.AppVersion | toString) -}}
{{- $_ := set $labels "app.kubernetes.io/part-of" "regroup" -}}
{{- $_ := set $labels "app.kubernetes.io/managed-by" .ctx.Release.Service -}}
{{- $_ := set $labels "helm.sh/chart" (printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_") -}}
{{- toYaml (merge $labels (.extra | default dict) (.ctx.Values.commonLabels | default dict)) -}}
{{- end -}}

{{/*
[global.imageRegistry or image.registry/]image.repository, then @image.digest when set (a
digest names one image for good, whatever the tag now points to), else :image.tag; global
wins, as in a parent chart's mirror.
*/}}
{{- define "regroup.image" -}}
{{- $registry := (.Values.global).imageRegistry | default .Values.image.registry -}}
{{- $reference := printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- if .Values.image.digest -}}
{{- $reference = printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- end -}}
{{- if $registry -}}
{{- printf "%s/%s" (trimSuffix "/" $registry) $reference -}}
{{- else -}}
{{- $reference -}}
{{- end -}}
{{- end -}}

{{/* global.imagePullSecrets then imagePullSecrets, each a name or {name: ...}, without repeats. */}}
{{- define "regroup.imagePullSecrets" -}}
{{- $names := list -}}
{{- range concat ((.Values.global).imagePullSecrets | default list) (.Values.imagePullSecrets | default list) -}}
{{- if kindIs "string" . -}}
{{- $names = append $names . -}}
{{- else -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- end -}}
{{- with uniq $names }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "regroup.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "regroup.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The migration Job runs as a pre-install/pre-upgrade hook, before the release's own
resources exist (install) or change (upgrade): it cannot use the ServiceAccount and
the Secret the chart creates. When the chart creates them, it also creates a copy of
each for the Job, as hooks of the same phase (see migrate-job.yaml).
*/}}
{{- define "regroup.migrateServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- include "regroup.migrateName" . -}}
{{- else -}}
{{- include "regroup.serviceAccountName" . -}}
{{- end -}}
{{- end -}}

{{- define "regroup.databaseSecret" -}}
{{- default (printf "%s-database" (include "regroup.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{- define "regroup.migrateDatabaseSecret" -}}
{{- if .Values.database.existingSecret -}}
{{- .Values.database.existingSecret -}}
{{- else -}}
{{- printf "%s-database" (include "regroup.migrateName" .) -}}
{{- end -}}
{{- end -}}

{{/*
Changes whenever the DSN the chart stores changes (or which Secret and key to read),
so that pods restart on it: a Secret's new content never reaches a running pod's
environment. The content of an existingSecret is not the chart's to see; after
changing one, restart the pods (kubectl rollout restart).
*/}}
{{- define "regroup.databaseChecksum" -}}
{{- list .Values.database.url .Values.database.existingSecret .Values.database.existingSecretKey | toJson | sha256sum -}}
{{- end -}}

{{- define "regroup.validate" -}}
{{- if and .Values.database.url .Values.database.existingSecret -}}
{{- fail "database: set database.url or database.existingSecret, not both: with url the chart creates the Secret holding the DSN, with existingSecret it reads yours." -}}
{{- end -}}
{{- if not (or .Values.database.url .Values.database.existingSecret) -}}
{{- fail "database: set database.url (a postgresql:// DSN; the chart stores it in a Secret) or database.existingSecret (the name of your Secret holding the DSN under database.existingSecretKey)." -}}
{{- end -}}
{{- range .Values.extraVolumes -}}
{{- if has .name (list "tmp" "tls" "acl" "tokens") -}}
{{- fail (printf "extraVolumes: %q is the name of one of the chart's own volumes (tmp, tls, acl, tokens): give yours another." .name) -}}
{{- end -}}
{{- end -}}
{{- range .Values.sidecars -}}
{{- if eq .name "regroup" -}}
{{- fail "sidecars: \"regroup\" is the server container's name: give the sidecar another." -}}
{{- end -}}
{{- end -}}
{{- if ge (int64 .Values.config.leaseRenewMs) (int64 .Values.config.leaseMs) -}}
{{- fail (printf "config: leaseRenewMs (%d) must be smaller than leaseMs (%d): a replica renews its leases several times before they run out." (int64 .Values.config.leaseRenewMs) (int64 .Values.config.leaseMs)) -}}
{{- end -}}
{{- end -}}

{{/* The environment shared by the server and the migration job (DATABASE_URL comes apart: their Secrets differ). */}}
{{- define "regroup.env" -}}
- name: REGROUP_LISTEN
  value: "0.0.0.0:{{ .Values.service.port }}"
- name: REGROUP_SESSION_TIMEOUT_MS
  value: {{ int64 .Values.config.sessionTimeoutMs | quote }}
- name: REGROUP_HEARTBEAT_INTERVAL_MS
  value: {{ int64 .Values.config.heartbeatIntervalMs | quote }}
{{- if gt (int .Values.config.maxGroupSize) 0 }}
- name: REGROUP_MAX_GROUP_SIZE
  value: {{ int64 .Values.config.maxGroupSize | quote }}
{{- end }}
- name: REGROUP_ASSIGNORS
  value: {{ .Values.config.assignors | quote }}
- name: REGROUP_MAX_MESSAGE_BYTES
  value: {{ int64 .Values.config.maxMessageBytes | quote }}
- name: REGROUP_ASSIGNMENT_INTERVAL_MS
  value: {{ int64 .Values.config.assignmentIntervalMs | quote }}
- name: REGROUP_INLINE_ASSIGNMENT_MAX_PARTITIONS
  value: {{ int64 .Values.config.inlineAssignmentMaxPartitions | quote }}
- name: REGROUP_OFFSETS_RETENTION_MS
  value: {{ int64 .Values.config.offsetsRetentionMs | quote }}
- name: REGROUP_OFFSETS_RETENTION_CHECK_MS
  value: {{ int64 .Values.config.offsetsRetentionCheckMs | quote }}
- name: REGROUP_SHUTDOWN_GRACE_S
  value: {{ .Values.config.shutdownGraceSeconds | quote }}
- name: REGROUP_ACCEPT_DEPTH
  value: {{ int .Values.config.acceptDepth | quote }}
- name: REGROUP_STORE_CHECK_MS
  value: {{ int64 .Values.config.storeCheckMs | quote }}
- name: REGROUP_STORE_TIMEOUT_MS
  value: {{ int64 .Values.config.storeTimeoutMs | quote }}
- name: REGROUP_LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
{{- /* The shard count is fixed by whoever first uses the database: the Job and the server propose the same. */}}
- name: REGROUP_SHARDS
  value: {{ int .Values.config.shards | quote }}
{{- end -}}

{{/*
The server's own environment: its name and address among the replicas, and its leases.
REGROUP_ADVERTISED_ADDRESS is where the other replicas (forwarding) and the clients
(NOT_COORDINATOR, FindCoordinator) reach this replica: its pod IP and the gRPC port.
*/}}
{{- define "regroup.replicaEnv" -}}
- name: REGROUP_REPLICA_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- if .Values.tls.enabled }}
{{- /* A name the replicas' certificate can cover (pod IPs cannot be known in advance). */}}
- name: REGROUP_ADVERTISED_ADDRESS
  value: "$(REGROUP_REPLICA_ID).{{ include "regroup.headlessName" . }}.{{ .Release.Namespace }}.svc.{{ .Values.tls.clusterDomain }}:{{ .Values.service.port }}"
- name: REGROUP_TLS_CERT
  value: /etc/regroup/tls/tls.crt
- name: REGROUP_TLS_KEY
  value: /etc/regroup/tls/tls.key
- name: REGROUP_TLS_CA
  value: /etc/regroup/tls/ca.crt
{{- if .Values.tls.clientAuth }}
- name: REGROUP_TLS_CLIENT_CA
  value: /etc/regroup/tls/ca.crt
{{- end }}
- name: REGROUP_HEALTH_LISTEN
  value: "0.0.0.0:{{ .Values.tls.healthPort }}"
{{- else }}
- name: REGROUP_ADVERTISED_ADDRESS
  value: "$(POD_IP):{{ .Values.service.port }}"
{{- end }}
{{- with .Values.accessControl }}
{{- if or .acl.configMap .acl.secret }}
- name: REGROUP_ACL_FILE
  value: /etc/regroup/acl/{{ .acl.key }}
{{- end }}
{{- if .tokens.secret }}
- name: REGROUP_TOKENS_FILE
  value: /etc/regroup/tokens/{{ .tokens.key }}
{{- end }}
{{- end }}
- name: REGROUP_LEASE_MS
  value: {{ int64 .Values.config.leaseMs | quote }}
- name: REGROUP_LEASE_RENEW_MS
  value: {{ int64 .Values.config.leaseRenewMs | quote }}
- name: REGROUP_FORWARD
  value: {{ .Values.config.forward | toString | quote }}
{{- /*
Metrics on every interface, for Prometheus; with the web view (no authentication) on the
pod's IP only: what a scraper reaches, and not the loopback or other interfaces.
*/}}
{{- if and .Values.webView.enabled (not .Values.metrics.enabled) }}
{{- fail "webView.enabled needs metrics.enabled: the web view is served on the metrics port" }}
{{- end }}
- name: REGROUP_METRICS_LISTEN
  {{- if not .Values.metrics.enabled }}
  value: "off"
  {{- else if .Values.webView.enabled }}
  value: "$(POD_IP):{{ int .Values.metrics.port }}"
  {{- else }}
  value: "0.0.0.0:{{ int .Values.metrics.port }}"
  {{- end }}
- name: REGROUP_WEB_VIEW
  value: {{ ternary "on" "off" .Values.webView.enabled | quote }}
{{- end -}}

{{/*
How long Kubernetes waits after SIGTERM before killing the server: the drain
(shutdownGraceSeconds), then handing the shards over and closing the store, each
bounded by storeTimeoutMs, and 5 s to spare. A killed replica's groups would wait
for their leases to run out instead.
*/}}
{{- define "regroup.terminationGracePeriodSeconds" -}}
{{- $grace := ceil .Values.config.shutdownGraceSeconds | int64 -}}
{{- $store := ceil (divf .Values.config.storeTimeoutMs 1000) | int64 -}}
{{- add $grace (mul 2 $store) 5 -}}
{{- end -}}

{{/* The server pods' affinity: .Values.affinity, plus the podAntiAffinity preset unless it has its own. */}}
{{- define "regroup.affinity" -}}
{{- $affinity := deepCopy (.Values.affinity | default dict) -}}
{{- if and (ne .Values.podAntiAffinity "none") (not (hasKey $affinity "podAntiAffinity")) -}}
{{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "regroup.selectorLabels" (dict "ctx" . "component" "server") | fromYaml)) -}}
{{- if eq .Values.podAntiAffinity "hard" -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) -}}
{{- else -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) -}}
{{- end -}}
{{- end -}}
{{- with $affinity -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}

{{/* The server pods' topology spread: topologySpreadConstraints when set, else zoneSpread's. */}}
{{- define "regroup.topologySpreadConstraints" -}}
{{- $selector := dict "matchLabels" (include "regroup.selectorLabels" (dict "ctx" . "component" "server") | fromYaml) -}}
{{- $constraints := list -}}
{{- if .Values.topologySpreadConstraints -}}
{{- range .Values.topologySpreadConstraints -}}
{{- $constraint := deepCopy . -}}
{{- if not (hasKey $constraint "labelSelector") -}}
{{- $_ := set $constraint "labelSelector" $selector -}}
{{- end -}}
{{- $constraints = append $constraints $constraint -}}
{{- end -}}
{{- else if ne .Values.zoneSpread "none" -}}
{{- $constraints = list (dict "maxSkew" 1 "topologyKey" "topology.kubernetes.io/zone" "whenUnsatisfiable" .Values.zoneSpread "labelSelector" $selector) -}}
{{- end -}}
{{- with $constraints -}}
{{- toYaml . -}}
{{- end -}}
{{- end -}}

{{- define "regroup.databaseEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .ctx.Values.database.existingSecretKey }}
{{- end -}}

{{/*
The port the probes read the health service on: the plain-text health port under TLS
(Kubernetes' gRPC probes cannot do TLS), else the API's.
*/}}
{{- define "regroup.probePort" -}}
{{- ternary .Values.tls.healthPort .Values.service.port .Values.tls.enabled -}}
{{- end -}}

{{/*
The peers the NetworkPolicy admits to the metrics port: networkPolicy.metrics when listed;
else, while a ServiceMonitor has Prometheus scrape that port, the Prometheus pods of
networkPolicy.prometheus: its namespace by the kubernetes.io/metadata.name label Kubernetes
gives every namespace ("" for the release's own), its pods by podLabels, the Prometheus
Operator's app.kubernetes.io/name: prometheus when empty (an empty default rather than that
label: Helm would merge a user's podLabels into a default map, not replace it); else none.
*/}}
{{- define "regroup.metricsPeers" -}}
{{- if .Values.networkPolicy.metrics -}}
{{- toYaml .Values.networkPolicy.metrics -}}
{{- else if .Values.metrics.serviceMonitor.enabled -}}
{{- $peer := dict -}}
{{- with .Values.networkPolicy.prometheus -}}
{{- if .namespace -}}
{{- $_ := set $peer "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" .namespace)) -}}
{{- end -}}
{{- $podLabels := .podLabels | default (dict "app.kubernetes.io/name" "prometheus") -}}
{{- $_ := set $peer "podSelector" (dict "matchLabels" $podLabels) -}}
{{- end -}}
{{- toYaml (list $peer) -}}
{{- else -}}
[]
{{- end -}}
{{- end -}}
