{{/* Names, labels and shared snippets of the hami-go chart. */}}

{{- define "hami-go.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Object-name prefix: fullnameOverride, or <release>-<name> (just <release> when it already contains the name). */}}
{{- define "hami-go.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hami-go.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "hami-go.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: include "hami-go.selectorLabels" (list $ "webhook"). */}}
{{- define "hami-go.selectorLabels" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ include "hami-go.name" $ }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* All labels of one component's objects: include "hami-go.componentLabels" (list $ "webhook"). */}}
{{- define "hami-go.componentLabels" -}}
{{ include "hami-go.labels" (index . 0) }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* image reference: include "hami-go.image" (list $ .Values.webhook.image). Empty tag = appVersion. */}}
{{- define "hami-go.image" -}}
{{- $ := index . 0 -}}
{{- $img := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $.Chart.AppVersion ($img.tag | toString)) -}}
{{- end -}}

{{/* Env of every container: the API-server override (apiServer.host/port). */}}
{{- define "hami-go.apiServerEnv" -}}
{{- if .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .Values.apiServer.host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .Values.apiServer.port | toString | quote }}
{{- end }}
{{- end -}}

{{/* Pod-level network settings of the node agents (the global hostNetwork). */}}
{{- define "hami-go.podNetwork" -}}
{{- if .Values.hostNetwork }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end -}}

{{/*
hami-go.hostNetwork: "true" when a Deployment's pods use the node's network: include
"hami-go.hostNetwork" (list $ .Values.webhook). The component's own hostNetwork (scheduler.hostNetwork,
webhook.hostNetwork) wins when it is a boolean; null (the default) follows the global hostNetwork.
*/}}
{{- define "hami-go.hostNetwork" -}}
{{- $ := index . 0 -}}
{{- $own := index . 1 -}}
{{- $v := $.Values.hostNetwork -}}
{{- if kindIs "bool" $own.hostNetwork }}{{ $v = $own.hostNetwork }}{{ end -}}
{{- if $v }}true{{ end -}}
{{- end -}}

{{/* Pod-level network settings of a Deployment's pods: (list $ .Values.<component>). */}}
{{- define "hami-go.podNetworkOf" -}}
{{- if include "hami-go.hostNetwork" . }}
hostNetwork: true
dnsPolicy: ClusterFirstWithHostNet
{{- end }}
{{- end -}}

{{- define "hami-go.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The --resource-* flags every binary takes. */}}
{{- define "hami-go.resourceArgs" -}}
- --resource-count={{ .Values.resourceNames.count }}
- --resource-memory={{ .Values.resourceNames.memory }}
- --resource-memory-percentage={{ .Values.resourceNames.memoryPercentage }}
- --resource-cores={{ .Values.resourceNames.cores }}
{{- end -}}

{{/* Security context of containers that need no privileges at all. */}}
{{- define "hami-go.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "hami-go.devicePlugin.fullname" -}}{{ include "hami-go.fullname" . }}-device-plugin{{- end -}}
{{- define "hami-go.scheduler.fullname" -}}{{ include "hami-go.fullname" . }}-scheduler{{- end -}}
{{- define "hami-go.webhook.fullname" -}}{{ include "hami-go.fullname" . }}-webhook{{- end -}}
{{- define "hami-go.draDriver.fullname" -}}{{ include "hami-go.fullname" . }}-dra-driver{{- end -}}
{{- define "hami-go.mps.fullname" -}}{{ include "hami-go.fullname" . }}-mps-control-daemon{{- end -}}

{{- define "hami-go.webhook.secretName" -}}
{{- default (printf "%s-tls" (include "hami-go.webhook.fullname" .)) .Values.webhook.certs.secretName -}}
{{- end -}}

{{/* DNS names of the webhook Service, for the serving certificate. */}}
{{- define "hami-go.webhook.dnsNames" -}}
{{- $svc := include "hami-go.webhook.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) -}}
{{- if .Values.webhook.url -}}
{{- $host := (urlParse .Values.webhook.url).hostname -}}
{{- if not (regexMatch "^[0-9.]+$|:" $host) -}}
{{- $names = append $names $host -}}
{{- end -}}
{{- end -}}
{{- toJson $names -}}
{{- end -}}

{{/* IP addresses for the serving certificate: the webhook URL's host when it is an IP. */}}
{{- define "hami-go.webhook.ipAddresses" -}}
{{- $ips := list -}}
{{- if .Values.webhook.url -}}
{{- $host := (urlParse .Values.webhook.url).hostname -}}
{{- if regexMatch "^[0-9.]+$|:" $host -}}
{{- $ips = append $ips $host -}}
{{- end -}}
{{- end -}}
{{- toJson $ips -}}
{{- end -}}

{{/*
The driver root's dev directory on the host (devicePlugin.driverRoot "/" -> /dev,
/run/nvidia/driver -> /run/nvidia/driver/dev); the device plugin sees it at /host<this>
(pkg/deviceplugin run.go: nodeagent.HostRoot + the CDI spec's hostPath).
*/}}
{{- define "hami-go.driverDevDir" -}}
{{- printf "%s/dev" (trimSuffix "/" (toString .Values.devicePlugin.driverRoot)) -}}
{{- end -}}

{{/* Checks of values the templates cannot express in their schema: fail with the value named. */}}
{{/*
A Go duration of whole units (h, m, s, ms; "15s", "1m30s", "500ms") in milliseconds, or "" when the
value is not one: include "hami-go.ms" "1m30s" -> 90000.
*/}}
{{- define "hami-go.ms" -}}
{{- $s := toString . -}}
{{- if regexMatch "^([0-9]+(h|ms|m|s))+$" $s -}}
{{- $ms := 0 -}}
{{- range regexFindAll "[0-9]+(h|ms|m|s)" $s -1 -}}
{{- $n := regexFind "^[0-9]+" . -}}
{{- $ms = add $ms (mul (atoi $n) (get (dict "h" 3600000 "m" 60000 "s" 1000 "ms" 1) (trimPrefix $n .))) -}}
{{- end -}}
{{- $ms -}}
{{- end -}}
{{- end -}}

{{- define "hami-go.validate" -}}
{{- $dp := .Values.devicePlugin -}}
{{- $le := .Values.scheduler.leaderElection -}}
{{- $ms := dict -}}
{{- range $k, $def := dict "leaseDuration" "15s" "renewDeadline" "10s" "retryPeriod" "2s" -}}
{{- $v := include "hami-go.ms" (index $le $k | default $def) -}}
{{- if not $v -}}
{{- fail (printf "scheduler.leaderElection.%s must be a Go duration of whole units such as 15s or 1m30s, got %q" $k (toString (index $le $k))) -}}
{{- end -}}
{{- $_ := set $ms $k (atoi $v) -}}
{{- end -}}
{{- if le $ms.leaseDuration (add 10000 $ms.retryPeriod) -}}
{{- fail (printf "scheduler.leaderElection.leaseDuration must exceed the extender's bind API timeout (10s) plus retryPeriod (%dms), got %dms: a standby would take over while a Binding of the dead leader can still land, and place a pod beside it on the same GPU share" $ms.retryPeriod $ms.leaseDuration) -}}
{{- end -}}
{{- if ge $ms.renewDeadline $ms.leaseDuration -}}
{{- fail (printf "scheduler.leaderElection.renewDeadline (%dms) must be less than leaseDuration (%dms), as kube-scheduler requires" $ms.renewDeadline $ms.leaseDuration) -}}
{{- end -}}
{{- if not (has .Values.mode (list "deviceplugin" "dra")) -}}
{{- fail (printf "mode must be \"deviceplugin\" or \"dra\", got %q" (toString .Values.mode)) -}}
{{- end -}}
{{- $kv := include "hami-go.kubeVersion" . -}}
{{- if and (eq .Values.mode "dra") (not (semverCompare ">=1.34.0-0" $kv)) -}}
{{- fail (printf "DRA mode needs Kubernetes >= 1.34 (resource.k8s.io/v1); the cluster is %s: use mode deviceplugin" $kv) -}}
{{- end -}}
{{- if not (has (.Values.hamiCore.installVia | default "" | toString) (list "" "imageVolume" "initContainer")) -}}
{{- fail (printf "hamiCore.installVia must be \"imageVolume\", \"initContainer\" or \"\" (imageVolume from Kubernetes 1.35, initContainer before), got %q" (toString .Values.hamiCore.installVia)) -}}
{{- end -}}
{{- if and (include "hami-go.hamiCore.install" .) (eq (include "hami-go.hamiCore.installVia" .) "imageVolume") (not (semverCompare ">=1.31.0-0" $kv)) -}}
{{- fail (printf "hamiCore.installVia=imageVolume needs Kubernetes >= 1.31 (image volumes: alpha in 1.31, on by default from 1.35); the cluster is %s: use initContainer, or leave it empty" $kv) -}}
{{- end -}}
{{- if not (has .Values.draDriver.deviceOrder (list "index" "binpack" "spread")) -}}
{{- fail (printf "draDriver.deviceOrder must be \"index\", \"binpack\" or \"spread\", got %q" (toString .Values.draDriver.deviceOrder)) -}}
{{- end -}}
{{- if not (has $dp.backend (list "nvml" "fake")) -}}
{{- fail (printf "devicePlugin.backend must be \"nvml\" or \"fake\", got %q" (toString $dp.backend)) -}}
{{- end -}}
{{- if not (has $dp.enforcement (list "hami-core" "mps" "none")) -}}
{{- fail (printf "devicePlugin.enforcement must be \"hami-core\", \"mps\" or \"none\", got %q" (toString $dp.enforcement)) -}}
{{- end -}}
{{- if not (has (toString $dp.deviceListStrategy) (list "" "envvar" "cdi")) -}}
{{- fail (printf "devicePlugin.deviceListStrategy must be \"envvar\", \"cdi\" or \"\" (cdi for nvml, envvar for fake), got %q" (toString $dp.deviceListStrategy)) -}}
{{- end -}}
{{- if and (eq .Values.mode "deviceplugin") (not $dp.nriSocket) -}}
{{- fail "mode deviceplugin needs the NRI plugin, which applies each pod's plan at container creation, but devicePlugin.nriSocket is empty" -}}
{{- end -}}
{{- if and (eq .Values.mode "deviceplugin") (eq $dp.backend "nvml") (eq (include "hami-go.deviceListStrategy" .) "envvar") -}}
{{- fail "devicePlugin.deviceListStrategy=envvar does not serve real GPUs (backend nvml): the NRI plugin adds each container's GPUs as CDI devices, so a container it misses gets none, not the image's NVIDIA_VISIBLE_DEVICES" -}}
{{- end -}}
{{- if not (hasPrefix "/" (toString $dp.driverRoot)) -}}
{{- fail (printf "devicePlugin.driverRoot must be an absolute host path (\"/\" for a driver installed on the host), got %q" (toString $dp.driverRoot)) -}}
{{- end -}}
{{- range $k := list "toolkitConfig" "containerdConfig" -}}
{{- $l := index ($dp.preflight | default dict) $k -}}
{{- if not (kindIs "slice" $l) -}}
{{- fail (printf "devicePlugin.preflight.%s must be a list of host paths, got %v" $k $l) -}}
{{- end -}}
{{- range $l -}}
{{- if or (not (hasPrefix "/" (toString .))) (contains "," (toString .)) (eq (clean (toString .)) "/") -}}
{{- fail (printf "devicePlugin.preflight.%s: %q is not an absolute host path of a file" $k (toString .)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (has (toString $dp.nvidiaDevices) (list "env" "cdi-annotation" "driver-root")) -}}
{{- fail (printf "devicePlugin.nvidiaDevices must be \"env\", \"cdi-annotation\" or \"driver-root\", got %q" (toString $dp.nvidiaDevices)) -}}
{{- end -}}
{{- if and (eq (toString $dp.nvidiaDevices) "cdi-annotation") (not $dp.toolkitCDIKind) -}}
{{- fail "devicePlugin.nvidiaDevices=cdi-annotation names the NVIDIA Container Toolkit's device <toolkitCDIKind>=all, but devicePlugin.toolkitCDIKind is empty" -}}
{{- end -}}
{{- if not (hasPrefix "/" (toString $dp.driverLibDir)) -}}
{{- fail (printf "devicePlugin.driverLibDir must be the driver's library directory below driverRoot, absolute (/usr/lib/x86_64-linux-gnu), got %q" (toString $dp.driverLibDir)) -}}
{{- end -}}
{{- if and $dp.toolkitCDIKind (not (regexMatch "^[a-zA-Z0-9][a-zA-Z0-9.-]*[a-zA-Z0-9]/[a-zA-Z0-9][a-zA-Z0-9_.-]*[a-zA-Z0-9]$" (toString $dp.toolkitCDIKind))) -}}
{{- fail (printf "devicePlugin.toolkitCDIKind must be a CDI kind <vendor>/<class> such as nvidia.com/gpu, or \"\" for none, got %q" (toString $dp.toolkitCDIKind)) -}}
{{- end -}}
{{- if and .Values.webhook.gpuMemoryNodeAffinity (eq .Values.mode "dra") -}}
{{- fail "webhook.gpuMemoryNodeAffinity is for mode deviceplugin (in mode dra the nodes carry no nvidia.com/gpu.memory label of hami-go's)" -}}
{{- end -}}
{{- if and .Values.webhook.draSchedulerName (ne .Values.mode "dra") -}}
{{- fail (printf "webhook.draSchedulerName is for mode dra (mode %s sets scheduler.name on GPU pods), got %q" (toString .Values.mode) (toString .Values.webhook.draSchedulerName)) -}}
{{- end -}}
{{- if not (has .Values.webhook.resourceAnnotations (list "deny" "warn")) -}}
{{- fail (printf "webhook.resourceAnnotations must be \"deny\" or \"warn\", got %q" (toString .Values.webhook.resourceAnnotations)) -}}
{{- end -}}
{{- if lt (int $dp.splitCount) 1 -}}
{{- fail (printf "devicePlugin.splitCount must be >= 1, got %v" $dp.splitCount) -}}
{{- end -}}
{{- if lt (float64 $dp.memoryScaling) 1.0 -}}
{{- fail (printf "devicePlugin.memoryScaling must be >= 1, got %v" $dp.memoryScaling) -}}
{{- end -}}
{{- range $k, $p := dict "scheduler.extender.nodePolicy" .Values.scheduler.extender.nodePolicy "scheduler.extender.gpuPolicy" .Values.scheduler.extender.gpuPolicy -}}
{{- if not (has $p (list "binpack" "spread")) -}}
{{- fail (printf "%s must be \"binpack\" or \"spread\", got %q" $k (toString $p)) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.webhook.failurePolicy (list "Fail" "Ignore")) -}}
{{- fail (printf "webhook.failurePolicy must be \"Fail\" or \"Ignore\", got %q" (toString .Values.webhook.failurePolicy)) -}}
{{- end -}}
{{- if not (has .Values.webhook.privileged (list "deny" "ignore")) -}}
{{- fail (printf "webhook.privileged must be \"deny\" or \"ignore\", got %q" (toString .Values.webhook.privileged)) -}}
{{- end -}}
{{- if not (has .Values.webhook.certs.mode (list "generate" "certManager" "secret")) -}}
{{- fail (printf "webhook.certs.mode must be \"generate\", \"certManager\" or \"secret\", got %q" (toString .Values.webhook.certs.mode)) -}}
{{- end -}}
{{- if and (eq .Values.webhook.certs.mode "secret") (or (not .Values.webhook.certs.secretName) (not .Values.webhook.certs.caBundle)) -}}
{{- fail "webhook.certs.mode \"secret\" needs webhook.certs.secretName and webhook.certs.caBundle" -}}
{{- end -}}
{{- if .Values.webhook.url -}}
{{- if not (hasPrefix "https://" .Values.webhook.url) -}}
{{- fail (printf "webhook.url must start with https://, got %q" .Values.webhook.url) -}}
{{- end -}}
{{- end -}}
{{- if include "hami-go.hamiCore.install" . -}}
{{- $hc := .Values.hamiCore -}}
{{- if not $hc.image.repository -}}
{{- fail "hamiCore.image.repository is empty: set it, or hamiCore.install=false to bring your own library" -}}
{{- end -}}
{{- if and (not ($hc.image.tag | toString)) (not $hc.image.digest) -}}
{{- fail "hamiCore.image needs a tag or a digest" -}}
{{- end -}}
{{- if and $hc.image.digest (not (regexMatch "^sha256:[0-9a-f]{64}$" $hc.image.digest)) -}}
{{- fail (printf "hamiCore.image.digest must be \"sha256:<64 lowercase hex digits>\", got %q" (toString $hc.image.digest)) -}}
{{- end -}}
{{- if not (has $hc.image.pullPolicy (list "Always" "IfNotPresent" "Never")) -}}
{{- fail (printf "hamiCore.image.pullPolicy must be \"Always\", \"IfNotPresent\" or \"Never\", got %q" (toString $hc.image.pullPolicy)) -}}
{{- end -}}
{{- if or (not $hc.libraryPath) (hasPrefix "/" (toString $hc.libraryPath)) -}}
{{- fail (printf "hamiCore.libraryPath must be a pattern relative to the image's root, got %q" (toString $hc.libraryPath)) -}}
{{- end -}}
{{- if not (hasPrefix "/" (toString $hc.hostDir)) -}}
{{- fail (printf "hamiCore.hostDir must be an absolute host path, got %q" (toString $hc.hostDir)) -}}
{{- end -}}
{{- end -}}
{{- include "hami-go.validate.placement" . -}}
{{- if lt (int .Values.scheduler.replicas) 1 -}}
{{- fail (printf "scheduler.replicas must be >= 1, got %v" .Values.scheduler.replicas) -}}
{{- end -}}
{{- end -}}

{{/*
Deployment update strategy. With hostNetwork a new replica needs the host ports the old one holds,
so a surge replica could never be placed on a node the old one uses: replace one at a time
(maxSurge 0, maxUnavailable 1) instead of deadlocking the rollout. Called with (list $ .Values.<component>).
*/}}
{{- define "hami-go.deploymentStrategy" -}}
{{- if include "hami-go.hostNetwork" . }}
strategy:
  type: RollingUpdate
  rollingUpdate:
    maxSurge: 0
    maxUnavailable: 1
{{- end }}
{{- end -}}

{{/*
The device plugin's --device-list-strategy: devicePlugin.deviceListStrategy, or when it is empty
cdi for the nvml backend and envvar for the fake one (case C37).
*/}}
{{- define "hami-go.deviceListStrategy" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if $dp.deviceListStrategy -}}{{ $dp.deviceListStrategy }}{{- else if eq $dp.backend "fake" -}}envvar{{- else -}}cdi{{- end -}}
{{- end -}}

{{/*
hami-go.schedulerEnabled: "true" when hami-go's kube-scheduler and extender are installed:
scheduler.enabled in mode deviceplugin. In mode dra stock kube-scheduler allocates the claims
and no extender runs, whatever scheduler.enabled says.
*/}}
{{- define "hami-go.schedulerEnabled" -}}
{{- if and .Values.scheduler.enabled (eq .Values.mode "deviceplugin") }}true{{ end -}}
{{- end -}}

{{/*
hami-go.placement: scheduler.placement, "extender" or "plugin" (hami-go.validate.placement
refuses anything else); empty or absent (a release upgraded with --reuse-values from a chart
without the value) is "extender".
*/}}
{{- define "hami-go.placement" -}}
{{- .Values.scheduler.placement | default "extender" | toString -}}
{{- end -}}

{{/*
hami-go.extenderEnabled: "true" when the scheduler runs with the extender sidecar
(hami-go.schedulerEnabled and placement extender): its TLS Secret, its metrics Service,
ServiceMonitor and alerts. With placement plugin kube-scheduler runs the placement in-process.
*/}}
{{- define "hami-go.extenderEnabled" -}}
{{- if and (include "hami-go.schedulerEnabled" .) (eq (include "hami-go.placement" .) "extender") }}true{{ end -}}
{{- end -}}

{{/*
hami-go.scheduler.pluginProfile: the profile's plugins and pluginConfig with placement plugin
(YAML under a profile): HamiGo at every extension point it implements, its args from the values
the extender's flags come from (pkg/schedplugin args.go; decoded strictly), and NodeResourcesFit
replaced by the build's HamiGoNodeResourcesFit (cmd/kube-scheduler-hami-go/nodefit: the same
answers, its extended-resource names classified once per pod instead of by a regular expression
on every node; weight 1 as upstream's default), ignoring the per-GPU names the nodes do not
advertise, as the extender's managedResources (ignoredByScheduler) make kube-scheduler do. kube-scheduler runs a plugin enabled only at a
specific extension point after the defaults it enables through multiPoint (framework runtime
expandMultiPointPlugins), so HamiGo's Bind would follow DefaultBinder, which binds every pod and
leaves HamiGo's bind (the planned allocation) unreached, and its PostFilter would follow
DefaultPreemption. At those two points the default is disabled and enabled again after HamiGo,
which makes both run in the order listed.
*/}}
{{- define "hami-go.scheduler.pluginProfile" -}}
{{- $s := .Values.scheduler -}}
{{- $rn := .Values.resourceNames -}}
{{- $after := dict "postFilter" "DefaultPreemption" "bind" "DefaultBinder" -}}
plugins:
  multiPoint:
    enabled:
      - name: HamiGoNodeResourcesFit
        weight: 1
    disabled:
      - name: NodeResourcesFit
{{- range list "preFilter" "filter" "postFilter" "preScore" "score" "reserve" "bind" }}
  {{ . }}:
    enabled:
      - name: HamiGo
    {{- with get $after . }}
      - name: {{ . }}
    disabled:
      - name: {{ . }}
    {{- end }}
{{- end }}
pluginConfig:
  - name: HamiGo
    args:
      schedulerName: {{ $s.name | quote }}
      nodePolicy: {{ $s.extender.nodePolicy | quote }}
      gpuPolicy: {{ $s.extender.gpuPolicy | quote }}
      preemption: {{ $s.extender.preemption | quote }}
      leaseNamespace: {{ .Values.leaseNamespace | quote }}
      inventoryStaleAfter: {{ $s.extender.inventoryStaleAfter | toString | quote }}
      # This kube-scheduler's own leader-election Lease: after a takeover the plugin places
      # pods only once the previous leader's binds are over (pkg/extender leader.go).
      leaderElectionLease: {{ printf "%s/%s" .Release.Namespace $s.name | quote }}
      resources:
        count: {{ $rn.count | quote }}
        memory: {{ $rn.memory | quote }}
        memoryPercent: {{ $rn.memoryPercentage | quote }}
        cores: {{ $rn.cores | quote }}
  - name: HamiGoNodeResourcesFit
    args:
      ignoredResources:
        - {{ $rn.memory | quote }}
        - {{ $rn.memoryPercentage | quote }}
        - {{ $rn.cores | quote }}
{{- end -}}

{{/*
hami-go.validate.placement: scheduler.placement is extender or plugin; with plugin (where the
scheduler is installed) the cluster is at least 1.37, the plugin binary's kube-scheduler version
(Kubernetes' version skew policy: kube-scheduler must not be newer than kube-apiserver).
*/}}
{{- define "hami-go.validate.placement" -}}
{{- $p := include "hami-go.placement" . -}}
{{- if not (has $p (list "extender" "plugin")) -}}
{{- fail (printf "scheduler.placement must be \"extender\" or \"plugin\", got %q" $p) -}}
{{- end -}}
{{- if and (eq $p "plugin") (include "hami-go.schedulerEnabled" .) -}}
{{- $kv := include "hami-go.kubeVersion" . -}}
{{- if not (semverCompare ">=1.37.0-0" $kv) -}}
{{- fail (printf "scheduler.placement=plugin runs kube-scheduler v1.37.2 (scheduler.plugin.image), which must not be newer than the API server (Kubernetes' version skew policy); the cluster is %s: use scheduler.placement=extender" $kv) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
hami-go.hamiCore.install: "true" when the node agents install HAMi-core from hamiCore.image:
hamiCore.install, with real GPUs (backend nvml; the fake backend's clusters have no such image)
and hami-core enforcement (the only mode that preloads it).
*/}}
{{/*
hami-go.kubeVersion: the cluster's version as v<major>.<minor>.<patch> (.Capabilities.KubeVersion:
the API server's at install, --kube-version in helm template; vendor suffixes such as -eks-... or
+k3s1 dropped).
*/}}
{{- define "hami-go.kubeVersion" -}}
{{- $kv := .Capabilities.KubeVersion -}}
{{- $v := regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+" $kv.Version -}}
{{- if not $v }}{{ $v = printf "%s.%s.0" $kv.Major (regexFind "^[0-9]+" $kv.Minor) }}{{ end -}}
v{{ trimPrefix "v" $v }}
{{- end -}}

{{/*
hami-go.kubeScheduler.image: scheduler.kubeScheduler.image; an empty tag is the cluster's version
(hami-go.kubeVersion): kube-scheduler must not be newer than kube-apiserver.
*/}}
{{- define "hami-go.kubeScheduler.image" -}}
{{- $img := .Values.scheduler.kubeScheduler.image -}}
{{- printf "%s:%s" $img.repository (default (include "hami-go.kubeVersion" .) ($img.tag | toString)) -}}
{{- end -}}

{{/*
hami-go.hamiCore.installVia: how the agent gets hamiCore.image at /hami-core-image:
hamiCore.installVia, or when empty "imageVolume" from Kubernetes 1.35 on (ImageVolume on by
default) and "initContainer" before.
*/}}
{{- define "hami-go.hamiCore.installVia" -}}
{{- $via := .Values.hamiCore.installVia | default "" | toString -}}
{{- if $via }}{{ $via }}{{ else if semverCompare ">=1.35.0-0" (include "hami-go.kubeVersion" .) }}imageVolume{{ else }}initContainer{{ end -}}
{{- end -}}

{{/*
hami-go.hamiCore.initContainers: with installVia initContainer, the pod's init container that
copies the files hamiCore.libraryPath matches in hamiCore.image (regular files, not symbolic
links, at the same relative paths) into the hami-core-image emptyDir, which the agent then reads
at /hami-core-image as it would the image volume (--hami-core-install-from). Nothing matching is
left for the agent to report (pkg/hamicore names the pattern and the directory).
*/}}
{{- define "hami-go.hamiCore.initContainers" -}}
{{- if and (include "hami-go.hamiCore.install" .) (eq (include "hami-go.hamiCore.installVia" .) "initContainer") -}}
initContainers:
  - name: hami-core-copy
    image: {{ include "hami-go.hamiCore.imageRef" . }}
    imagePullPolicy: {{ .Values.hamiCore.image.pullPolicy }}
    command:
      - /bin/sh
      - -c
      - |
        set -eu
        cd /
        n=0
        for f in $HAMI_CORE_GLOB; do
          if [ -f "$f" ] && [ ! -L "$f" ]; then
            mkdir -p "/hami-core-copy/$(dirname "$f")"
            cp "$f" "/hami-core-copy/$f"
            echo "copied /$f"
            n=$((n + 1))
          fi
        done
        [ "$n" -gt 0 ] || echo "no regular file matches $HAMI_CORE_GLOB in the image" >&2
    env:
      - name: HAMI_CORE_GLOB
        value: {{ .Values.hamiCore.libraryPath | quote }}
    resources:
      requests:
        cpu: 10m
        memory: 16Mi
      limits:
        memory: 64Mi
    securityContext:
      {{- include "hami-go.restrictedContainer" . | nindent 6 }}
    volumeMounts:
      - name: hami-core-image
        mountPath: /hami-core-copy
{{- end -}}
{{- end -}}

{{- define "hami-go.hamiCore.install" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if and .Values.hamiCore.install (eq $dp.backend "nvml") (eq $dp.enforcement "hami-core") }}true{{ end -}}
{{- end -}}

{{/*
hami-go.hamiCore.imageRef: hamiCore.image as <repository>[:<tag>][@<digest>].
*/}}
{{- define "hami-go.hamiCore.imageRef" -}}
{{- $img := .Values.hamiCore.image -}}
{{- $img.repository -}}
{{- with ($img.tag | toString) }}:{{ . }}{{ end -}}
{{- with $img.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/*
hami-go.hamiCore.cacheDir: the host directory of the GPU containers' own HAMi-core cache
directories (<hamiCore.hostDir>/containers), with hami-core enforcement on any backend: HAMi-core
exits in every CUDA process that cannot create its cache file, and a readOnlyRootFilesystem
container cannot create it in its root filesystem.
*/}}
{{- define "hami-go.hamiCore.cacheDir" -}}
{{- if eq .Values.devicePlugin.enforcement "hami-core" }}{{ .Values.hamiCore.hostDir }}/containers{{ end -}}
{{- end -}}

{{/*
hami-go.hamiCore.args: the node agents' HAMi-core flags. Installing: the image volume's mount
path, the library's pattern in it and the host directory; otherwise today's
--hami-core-library. With hami-core enforcement, the containers' cache directories.
*/}}
{{- define "hami-go.hamiCore.args" -}}
{{- if include "hami-go.hamiCore.install" . -}}
- --hami-core-install-from=/hami-core-image
- --hami-core-install-glob={{ .Values.hamiCore.libraryPath }}
- --hami-core-host-dir={{ .Values.hamiCore.hostDir }}
{{- else -}}
- --hami-core-library={{ .Values.devicePlugin.hamiCoreLibrary }}
{{- end }}
{{- with include "hami-go.hamiCore.cacheDir" . }}
- --hami-core-cache-dir={{ . }}
{{- end -}}
{{- end -}}

{{/*
hami-go.hamiCore.volumeMounts and .volumes: the node agent's HAMi-core mounts (backend nvml,
enforcement hami-core). Installing: the image read-only at /hami-core-image and hostDir
read-write (the agent writes the library and creates the cache directories); otherwise the
bring-your-own library's directory read-only.
*/}}
{{- define "hami-go.hamiCore.volumeMounts" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if include "hami-go.hamiCore.install" . -}}
- name: hami-core
  mountPath: {{ .Values.hamiCore.hostDir }}
- name: hami-core-image
  mountPath: /hami-core-image
  readOnly: true
{{- else if and (eq $dp.backend "nvml") (eq $dp.enforcement "hami-core") -}}
- name: hami-core
  mountPath: {{ dir $dp.hamiCoreLibrary }}
  readOnly: true
{{- end }}
{{- if and (not (include "hami-go.hamiCore.install" .)) (include "hami-go.hamiCore.cacheDir" .) }}
- name: hami-core-cache
  mountPath: {{ include "hami-go.hamiCore.cacheDir" . }}
{{- end -}}
{{- end -}}

{{- define "hami-go.hamiCore.volumes" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if include "hami-go.hamiCore.install" . -}}
- name: hami-core
  hostPath:
    path: {{ .Values.hamiCore.hostDir }}
    type: DirectoryOrCreate
{{- if eq (include "hami-go.hamiCore.installVia" .) "imageVolume" }}
- name: hami-core-image
  image:
    reference: {{ include "hami-go.hamiCore.imageRef" . }}
    pullPolicy: {{ .Values.hamiCore.image.pullPolicy }}
{{- else }}
- name: hami-core-image
  emptyDir:
    sizeLimit: 512Mi
{{- end }}
{{- else if and (eq $dp.backend "nvml") (eq $dp.enforcement "hami-core") -}}
- name: hami-core
  hostPath:
    path: {{ dir $dp.hamiCoreLibrary }}
    type: DirectoryOrCreate
{{- end }}
{{- if and (not (include "hami-go.hamiCore.install" .)) (include "hami-go.hamiCore.cacheDir" .) }}
- name: hami-core-cache
  hostPath:
    path: {{ include "hami-go.hamiCore.cacheDir" . }}
    type: DirectoryOrCreate
{{- end -}}
{{- end -}}

{{/* hami-go.drainTimeout: devicePlugin.drainTimeout, checked to be a whole number of seconds >= 0. */}}
{{- define "hami-go.drainTimeout" -}}
{{- $v := .Values.devicePlugin.drainTimeout -}}
{{- if not (or (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v)) -}}
{{- fail (printf "devicePlugin.drainTimeout must be a whole number of seconds >= 0, got %v" $v) -}}
{{- else if or (lt (float64 $v) 0.0) (ne (float64 $v) (float64 (int64 $v))) -}}
{{- fail (printf "devicePlugin.drainTimeout must be a whole number of seconds >= 0, got %v" $v) -}}
{{- end -}}
{{- int64 $v -}}
{{- end -}}

{{/*
The preflight's config candidates (issue 36 item 6): --toolkit-config and --containerd-config of
both node agents, from devicePlugin.preflight.
*/}}
{{- define "hami-go.preflight.args" -}}
{{- $pf := .Values.devicePlugin.preflight -}}
- --toolkit-config={{ join "," $pf.toolkitConfig }}
- --containerd-config={{ join "," $pf.containerdConfig }}
{{- end -}}

{{/*
The host directories mounted read-only under /host for the preflight's candidates, as a JSON list
of {"name", "path", "type"}. How a candidate's file becomes visible without mounting the host's
/ (which would hand the agent every secret on the node):
- under /etc: the host-etc volume (the whole /etc, mounted already) has it;
- under /usr: one mount of /usr (type Directory: /usr exists on every node; it holds the OS's
  programs and libraries, no secrets). Mounting the candidate's own directory instead fails the
  pod on nodes whose /usr is read-only and lack the directory (Talos, Flatcar, Bottlerocket, COS
  without the GPU Operator), and goes stale on GPU Operator nodes, whose toolkit container removes
  and recreates /usr/local/nvidia/toolkit at each restart;
- elsewhere (k3s's and rke2's /var/lib/rancher/...): the file's directory, type DirectoryOrCreate.
  Both DirectoryOrCreate and the untyped "" make a missing directory appear: the kubelet creates it
  for the former, and containerd's CRI and CRI-O create a missing bind-mount source for the latter.
  So a node without k3s gets an empty /var/lib/rancher/k3s/agent/etc/containerd; take the path out
  of devicePlugin.preflight.containerdConfig where that is unwanted. type Directory would keep such
  a node's agent from starting at all.
*/}}
{{- define "hami-go.preflight.hostDirs" -}}
{{- $pf := .Values.devicePlugin.preflight -}}
{{- $dirs := list -}}
{{- range concat $pf.toolkitConfig $pf.containerdConfig -}}
{{- $p := clean (toString .) -}}
{{- if hasPrefix "/etc/" $p -}}
{{- else if hasPrefix "/usr/" $p -}}
{{- $dirs = append $dirs "/usr" -}}
{{- else -}}
{{- $dirs = append $dirs (dir $p) -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $i, $d := uniq $dirs -}}
{{- $out = append $out (dict "name" (printf "preflight-%d" $i) "path" $d "type" (ternary "Directory" "DirectoryOrCreate" (eq $d "/usr"))) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{- define "hami-go.preflight.volumeMounts" -}}
{{- range (include "hami-go.preflight.hostDirs" . | fromJsonArray) }}
- name: {{ .name }}
  mountPath: /host{{ .path }}
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "hami-go.preflight.volumes" -}}
{{- range (include "hami-go.preflight.hostDirs" . | fromJsonArray) }}
- name: {{ .name }}
  hostPath:
    path: {{ .path }}
    type: {{ .type }}
{{- end -}}
{{- end -}}

{{/*
How a node agent (nvml backend) gets the driver: devicePlugin.nvidiaDevices (issue 36 item 7,
docs/runtimes.md "Closing the window without stopping the agents").
- env: NVIDIA_VISIBLE_DEVICES=all; the NVIDIA container runtime injects the device nodes and
  libnvidia-ml. Needs the runtime to honour an unprivileged container's env
  (accept-nvidia-visible-devices-envvar-when-unprivileged = true), or devicePlugin.privileged.
- cdi-annotation: the pod annotation cdi.k8s.io/hami-go-agent: <toolkitCDIKind>=all, honoured by
  the NVIDIA runtime in cdi mode (annotation-prefixes) when the runtime handler passes pod
  annotations on (containerd: pod_annotations = ["cdi.k8s.io/*"]); NVIDIA_VISIBLE_DEVICES=void.
- driver-root: no NVIDIA runtime: the whole driverRoot mounted read-only at /host<driverRoot> (as
  NVIDIA's device plugin mounts it at /driver-root), NVML loaded from <driverRoot><driverLibDir>
  there (--nvml-library), the container privileged for the device nodes (a hostPath char device
  is not in the container's device cgroup, so NVML could not open it unprivileged).
*/}}
{{- define "hami-go.nvidiaDevices.rootMount" -}}
{{- printf "/host%s" (trimSuffix "/" (toString .Values.devicePlugin.driverRoot)) -}}
{{- end -}}

{{- define "hami-go.nvidiaDevices.libDir" -}}
{{- $dp := .Values.devicePlugin -}}
{{- printf "%s%s" (trimSuffix "/" (toString $dp.driverRoot)) (clean (toString $dp.driverLibDir)) -}}
{{- end -}}

{{- define "hami-go.nvidiaDevices.privileged" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if and (eq $dp.backend "nvml") (or $dp.privileged (eq (toString $dp.nvidiaDevices) "driver-root")) -}}true{{- end -}}
{{- end -}}

{{- define "hami-go.nvidiaDevices.annotations" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if and (eq $dp.backend "nvml") (eq (toString $dp.nvidiaDevices) "cdi-annotation") }}
cdi.k8s.io/hami-go-agent: {{ $dp.toolkitCDIKind }}=all
{{- end -}}
{{- end -}}

{{- define "hami-go.nvidiaDevices.args" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if and (eq $dp.backend "nvml") (eq (toString $dp.nvidiaDevices) "driver-root") }}
- --nvml-library=/host{{ include "hami-go.nvidiaDevices.libDir" . }}/libnvidia-ml.so.1
{{- end -}}
{{- end -}}

{{- define "hami-go.nvidiaDevices.env" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if eq $dp.backend "nvml" -}}
{{- if eq (toString $dp.nvidiaDevices) "env" }}
# The NVIDIA container runtime injects every GPU's device nodes and libnvidia-ml.
- name: NVIDIA_VISIBLE_DEVICES
  value: all
- name: NVIDIA_DRIVER_CAPABILITIES
  value: utility
{{- else }}
# devicePlugin.nvidiaDevices={{ $dp.nvidiaDevices }}: no device from the env.
- name: NVIDIA_VISIBLE_DEVICES
  value: void
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hami-go.nvidiaDevices.volumeMounts" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if and (eq $dp.backend "nvml") (eq (toString $dp.nvidiaDevices) "driver-root") }}
- name: driver-root
  mountPath: {{ include "hami-go.nvidiaDevices.rootMount" . }}
  readOnly: true
{{- end -}}
{{- end -}}

{{- define "hami-go.nvidiaDevices.volumes" -}}
{{- $dp := .Values.devicePlugin -}}
{{- if and (eq $dp.backend "nvml") (eq (toString $dp.nvidiaDevices) "driver-root") }}
- name: driver-root
  hostPath:
    path: {{ .Values.devicePlugin.driverRoot }}
    type: Directory
{{- end -}}
{{- end -}}
