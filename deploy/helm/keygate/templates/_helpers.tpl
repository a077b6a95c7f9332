{{/* The release's name for keygate's objects. */}}
{{- define "keygate.fullname" -}}
{{- if contains "keygate" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-keygate" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "keygate.selectorLabels" -}}
app.kubernetes.io/name: keygate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "keygate.labels" -}}
{{ include "keygate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "keygate.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* keygate.yaml, from .Values.config. */}}
{{- define "keygate.config" -}}
{{ toYaml .Values.config }}
{{- end -}}
