{{- define "shadowguard.fullname" -}}
{{ .Release.Name }}-shadowguard
{{- end -}}

{{- define "shadowguard.labels" -}}
app.kubernetes.io/name: shadowguard
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "shadowguard.selectorLabels" -}}
app.kubernetes.io/name: shadowguard
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shadowguard.secretName" -}}
{{- if .Values.auth.existingSecret -}}
{{ .Values.auth.existingSecret }}
{{- else -}}
{{ include "shadowguard.fullname" . }}-tokens
{{- end -}}
{{- end -}}

{{- define "shadowguard.redisUrl" -}}
{{- if .Values.redis.externalUrl -}}
{{ .Values.redis.externalUrl }}
{{- else if .Values.redis.enabled -}}
redis://{{ include "shadowguard.fullname" . }}-redis:6379/0
{{- end -}}
{{- end -}}

{{/* The proxy container: in the proxy's own pod (standalone) or beside the app (sidecar). */}}
{{- define "shadowguard.proxyContainer" -}}
- name: shadowguard
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  ports:
    - name: http
      containerPort: {{ .Values.port }}
      protocol: TCP
  env:
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: SHADOWGUARD_CONFIG
      value: /etc/shadowguard/shadowguard.yaml
    - name: SHADOWGUARD_HTTP__HOST
      value: "0.0.0.0"
    - name: SHADOWGUARD_HTTP__PORT
      value: {{ .Values.port | quote }}
    - name: SHADOWGUARD_AUTH__AGENTS
      valueFrom:
        secretKeyRef:
          name: {{ include "shadowguard.secretName" . }}
          key: agents
    - name: SHADOWGUARD_AUTH__REVIEWERS
      valueFrom:
        secretKeyRef:
          name: {{ include "shadowguard.secretName" . }}
          key: reviewers
    - name: SHADOWGUARD_AUTH__ORCHESTRATORS
      valueFrom:
        secretKeyRef:
          name: {{ include "shadowguard.secretName" . }}
          key: orchestrators
    {{- if include "shadowguard.redisUrl" . }}
    - name: SHADOWGUARD_APPROVALS__STORE
      value: {{ include "shadowguard.redisUrl" . | quote }}
    - name: SHADOWGUARD_REPLICAS__REDIS
      value: {{ include "shadowguard.redisUrl" . | quote }}
    - name: SHADOWGUARD_REPLICAS__URL
      value: "http://$(POD_IP):{{ .Values.port }}"
    {{- end }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: http
    periodSeconds: 15
    failureThreshold: 3
  readinessProbe:
    httpGet:
      path: /readyz
      port: http
    periodSeconds: 5
    failureThreshold: 2
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: config
      mountPath: /etc/shadowguard
      readOnly: true
    - name: data
      mountPath: /var/lib/shadowguard
    - name: tmp
      mountPath: /tmp
{{- end -}}
