{{- define "regroup.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "regroup.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "regroup.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "regroup.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end -}}

{{- define "regroup.databaseSecret" -}}
{{- default (printf "%s-database" (include "regroup.fullname" .)) .Values.database.existingSecret -}}
{{- end -}}

{{/* The environment shared by the server and the migration job. */}}
{{- define "regroup.env" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "regroup.databaseSecret" . }}
      key: {{ .Values.database.existingSecretKey }}
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
{{- end -}}
