{{/* The image of a component: <repository>/<component>:<tag or appVersion>. */}}
{{- define "gryvia.image" -}}
{{ .root.Values.image.repository }}/{{ .component }}:{{ .root.Values.image.tag | default .root.Chart.AppVersion }}
{{- end -}}

{{/* The labels of a component's objects. */}}
{{- define "gryvia.labels" -}}
app.kubernetes.io/name: gryvia-{{ .component }}
app.kubernetes.io/part-of: gryvia
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end -}}

{{/* What every operator's container shares: pod identity for leader election, ports, probes. */}}
{{- define "gryvia.operatorEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end -}}

{{/* The operators' common flags. */}}
{{- define "gryvia.operatorArgs" -}}
- --log-format={{ .Values.logFormat }}
- --metrics-addr=0.0.0.0:8080
- --lease-namespace={{ .Release.Namespace }}
{{- if not .Values.leaderElection.enabled }}
- --no-leader-election
{{- end }}
{{- end -}}

{{/* A non-root, read-only container. */}}
{{- define "gryvia.restricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: [ALL]}
{{- end -}}

{{- define "gryvia.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
