{{/*
Pod affinity of a multi-replica component: include "hami-go.spreadAffinity" (list $ "webhook" .Values.webhook.affinity).
A user affinity wins. Otherwise replicas spread over nodes: required when the component uses the
node's network (hami-go.hostNetwork: their ports would collide on one node), preferred otherwise.
*/}}
{{- define "hami-go.spreadAffinity" -}}
{{- $ := index . 0 -}}
{{- $component := index . 1 -}}
{{- $user := index . 2 -}}
{{- $hostNetwork := include "hami-go.hostNetwork" (list $ (index $.Values $component)) -}}
{{- if $user -}}
affinity:
  {{- toYaml $user | nindent 2 }}
{{- else if $hostNetwork -}}
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

{{/*
Affinity of a node agent, one mode per node: include "hami-go.nodeAgentAffinity" (list $ "NotIn")
for the device plugin, (list $ "In") for the DRA driver. devicePlugin.affinity with one more
requirement in each of its required node-selector terms (a term is added when it has none): the
device plugin runs only where the node label hami-go.io/mode is not "dra" (absent included), the
DRA driver only where it is "dra". So two releases in different modes never put both node agents
on one node, whatever their nodeSelectors.
*/}}
{{- define "hami-go.nodeAgentAffinity" -}}
{{- $ := index . 0 -}}
{{- $expr := dict "key" "hami-go.io/mode" "operator" (index . 1) "values" (list "dra") -}}
{{- $aff := deepCopy ($.Values.devicePlugin.affinity | default dict) -}}
{{- $na := get $aff "nodeAffinity" | default dict -}}
{{- $req := get $na "requiredDuringSchedulingIgnoredDuringExecution" | default dict -}}
{{- $terms := list -}}
{{- range (get $req "nodeSelectorTerms" | default (list dict)) -}}
{{- $t := deepCopy . -}}
{{- $_ := set $t "matchExpressions" (append (get $t "matchExpressions" | default list) $expr) -}}
{{- $terms = append $terms $t -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $terms -}}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" $req -}}
{{- $_ := set $aff "nodeAffinity" $na -}}
affinity:
  {{- toYaml $aff | nindent 2 }}
{{- end -}}
