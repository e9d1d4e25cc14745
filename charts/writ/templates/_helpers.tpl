{{/* Chart name, truncated for DNS. */}}
{{- define "writ.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Release-qualified name; the operator's ServiceAccount is "<fullname>-operator". */}}
{{- define "writ.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "writ.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "writ.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "control-plane"). */}}
{{- define "writ.selectorLabels" -}}
app.kubernetes.io/name: {{ include "writ.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "writ.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "writ.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "writ.fullname" .)) -}}
{{- end -}}

{{/* Service URLs inside the cluster. */}}
{{- define "writ.identityUrl" -}}
http://{{ include "writ.fullname" . }}-identity.{{ .Release.Namespace }}.svc:{{ .Values.identity.port }}
{{- end -}}
{{- define "writ.mgmtUrl" -}}
http://{{ include "writ.fullname" . }}-control-plane.{{ .Release.Namespace }}.svc:{{ .Values.controlPlane.ports.mgmt }}
{{- end -}}
{{- define "writ.decisionUrl" -}}
http://{{ include "writ.fullname" . }}-control-plane.{{ .Release.Namespace }}.svc:{{ .Values.controlPlane.ports.decision }}
{{- end -}}
{{/* The proxy agents are sent to (HTTPS_PROXY): the egress gateway when enabled, else the control plane's forward proxy. */}}
{{- define "writ.proxyUrl" -}}
{{- if .Values.egressGateway.enabled -}}
http://{{ include "writ.fullname" . }}-egress-gateway.{{ .Release.Namespace }}.svc:{{ .Values.egressGateway.port }}
{{- else -}}
http://{{ include "writ.fullname" . }}-proxy.{{ .Release.Namespace }}.svc:{{ .Values.controlPlane.proxyService.port }}
{{- end -}}
{{- end -}}

{{/* True ("true") when a PostgreSQL URL Secret is in play. */}}
{{- define "writ.hasDatabase" -}}
{{- if or .Values.database.external.existingSecret .Values.database.inCluster.enabled -}}true{{- end -}}
{{- end -}}

{{/* env entry NAME = the PostgreSQL URL, from the external Secret or the in-cluster one. */}}
{{- define "writ.databaseUrlEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      {{- if .ctx.Values.database.external.existingSecret }}
      name: {{ .ctx.Values.database.external.existingSecret }}
      key: {{ .ctx.Values.database.external.urlKey }}
      {{- else }}
      name: {{ include "writ.fullname" .ctx }}-postgres
      key: url
      {{- end }}
{{- end -}}

{{/* Env every component gets. */}}
{{- define "writ.commonEnv" -}}
- name: LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- if .Values.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ .Values.tracing.otlpEndpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .Values.tracing.protocol | quote }}
{{- end }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .Values.tracing.sampler | quote }}
{{- if .Values.tracing.samplerArg }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .Values.tracing.samplerArg | quote }}
{{- end }}
- name: WRIT_API_AUTH
  value: {{ .Values.apiAuth | quote }}
{{- if eq .Values.apiAuth "keys" }}
- name: WRIT_BOOTSTRAP_ADMIN_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "writ.secretName" . }}
      key: {{ .Values.secrets.keys.bootstrapAdminKey }}
- name: WRIT_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "writ.secretName" . }}
      key: {{ .Values.secrets.keys.bootstrapAdminKey }}
{{- end }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end -}}

{{/* Writable scratch folders under a read-only root filesystem. */}}
{{- define "writ.scratchMounts" -}}
- name: data
  mountPath: /data
- name: tmp
  mountPath: /tmp
{{- end -}}
{{- define "writ.scratchVolumes" -}}
- name: data
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- end -}}

{{/* Scheduling and pull secrets of one component's pod spec: (dict "ctx" $ "c" <component values>). */}}
{{- define "writ.podPlacement" -}}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget for one component: (dict "ctx" $ "component" "identity" "c" .Values.identity). */}}
{{- define "writ.pdb" -}}
{{- if .c.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "writ.fullname" .ctx }}-{{ .component }}
  labels:
    {{- include "writ.labels" .ctx | nindent 4 }}
spec:
  maxUnavailable: {{ .c.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "writ.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/* With the in-cluster PostgreSQL: wait until it accepts connections (no crash loop at first install). */}}
{{- define "writ.waitForPostgres" -}}
{{- if and .Values.database.inCluster.enabled (not .Values.database.external.existingSecret) }}
initContainers:
  - name: wait-for-postgres
    image: {{ .Values.database.inCluster.image }}
    command: ["sh", "-c", "until pg_isready -q -h {{ include "writ.fullname" . }}-postgres.{{ .Release.Namespace }}.svc -p 5432; do sleep 1; done"]
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    resources:
      requests: { cpu: 10m, memory: 16Mi }
      limits: { memory: 64Mi }
{{- end }}
{{- end -}}

{{/*
The webhooks' namespaceSelector (SPEC 4.8: scoped to the application namespaces): only namespaces
labelled webhook.namespaceLabel (as sidecar injectors select theirs), and never kube-system, this
release's namespace (a webhook that can block its own pods deadlocks) or webhook.excludeNamespaces.
*/}}
{{- define "writ.webhookNamespaceSelector" -}}
{{- $c := .Values.webhook -}}
matchLabels:
  {{ $c.namespaceLabel.key }}: {{ $c.namespaceLabel.value | quote }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      - kube-system
      - {{ .Release.Namespace }}
      {{- range $c.excludeNamespaces }}
      - {{ . }}
      {{- end }}
{{- end }}
