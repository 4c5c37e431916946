{{/* Chart name, overridable. */}}
{{- define "seqctl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every resource name: <release>-seqctl unless overridden. */}}
{{- define "seqctl.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "seqctl.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "seqctl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one component; call with (dict "ctx" $ "component" "worker"). */}}
{{- define "seqctl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "seqctl.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "seqctl.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "seqctl.configMapName" -}}
{{ .Values.domain.existingConfigMap | default (printf "%s-domain" (include "seqctl.fullname" .)) }}
{{- end }}

{{/* The Secret with the Redis URL and password: the user's, or the chart's when it has
something to hold. Empty when there is none. */}}
{{- define "seqctl.redisSecretName" -}}
{{- if .Values.redis.existingSecret }}
{{- .Values.redis.existingSecret }}
{{- else if or .Values.redis.url .Values.redis.password }}
{{- printf "%s-redis" (include "seqctl.fullname" .) }}
{{- end }}
{{- end }}

{{- define "seqctl.tlsSecretName" -}}
{{ .Values.redis.tls.existingSecret | default (printf "%s-redis-tls" (include "seqctl.fullname" .)) }}
{{- end }}

{{/* The grace period: the engine's shutdown deadline plus the margin to release leases. */}}
{{- define "seqctl.terminationGracePeriodSeconds" -}}
{{ add (int .Values.worker.shutdownTimeoutSeconds) (int .Values.worker.shutdownMarginSeconds) }}
{{- end }}

{{/* Environment of both components: where Redis is and how to reach it. */}}
{{- define "seqctl.redisEnv" -}}
{{- $secret := include "seqctl.redisSecretName" . }}
{{- if and $secret (or .Values.redis.existingSecret .Values.redis.url) }}
- name: SEQCTL_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.redis.urlKey }}
{{- end }}
{{- if and $secret (or .Values.redis.existingSecret .Values.redis.password) }}
- name: SEQCTL_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: {{ .Values.redis.passwordKey }}
      optional: true
{{- end }}
{{- if .Values.redis.cluster }}
- name: SEQCTL_REDIS_CLUSTER
  value: "1"
{{- end }}
{{- if .Values.redis.tls.enabled }}
- name: SEQCTL_REDIS_TLS_CA
  value: /etc/seqctl/tls/{{ .Values.redis.tls.caKey }}
{{- if and .Values.redis.tls.certKey .Values.redis.tls.keyKey (or .Values.redis.tls.existingSecret .Values.redis.tls.cert) }}
- name: SEQCTL_REDIS_TLS_CERT
  value: /etc/seqctl/tls/{{ .Values.redis.tls.certKey }}
- name: SEQCTL_REDIS_TLS_KEY
  value: /etc/seqctl/tls/{{ .Values.redis.tls.keyKey }}
{{- end }}
{{- with .Values.redis.tls.serverName }}
- name: SEQCTL_REDIS_TLS_SERVER_NAME
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* Volumes of both components: domain.toml, /tmp, and the TLS files. */}}
{{- define "seqctl.volumes" -}}
- name: domain
  configMap:
    name: {{ include "seqctl.configMapName" . }}
    items:
      - key: {{ .Values.domain.key }}
        path: domain.toml
- name: tmp
  emptyDir: {}
{{- if .Values.redis.tls.enabled }}
- name: redis-tls
  secret:
    secretName: {{ include "seqctl.tlsSecretName" . }}
{{- end }}
{{- end }}

{{- define "seqctl.volumeMounts" -}}
- name: domain
  mountPath: /etc/seqctl/domain
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.redis.tls.enabled }}
- name: redis-tls
  mountPath: /etc/seqctl/tls
  readOnly: true
{{- end }}
{{- end }}
