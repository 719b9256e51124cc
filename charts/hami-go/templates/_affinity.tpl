{{/*
Pod affinity of a multi-replica component: include "hami-go.spreadAffinity" (list $ "webhook" .Values.webhook.affinity).
A user affinity wins. Otherwise replicas spread over nodes: required with hostNetwork (their ports
would collide on one node), preferred without.
*/}}
{{- define "hami-go.spreadAffinity" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- $user := index . 2 -}}
{{- if $user -}}
affinity:
  {{- toYaml $user | nindent 2 }}
{{- else if $.Values.hostNetwork -}}
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
      - topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "hami-go.selectorLabels" (list $ $component) | nindent 12 }}
{{- else -}}
affinity:
  podAntiAffinity:
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          topologyKey: kubernetes.io/hostname
          labelSelector:
            matchLabels:
              {{- include "hami-go.selectorLabels" (list $ $component) | nindent 14 }}
{{- end -}}
{{- end -}}
