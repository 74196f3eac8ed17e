{{/* The labels every object of the release carries. */}}
{{- define "simplyblock.labels" -}}
app.kubernetes.io/name: simplyblock-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The annotations every object of the release carries (commonAnnotations), as a
     metadata key, or nothing. */}}
{{- define "simplyblock.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pull secrets every workload pulls with (imagePullSecrets), as a pod spec key, or
     nothing. */}}
{{- define "simplyblock.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The operator pods' selector. */}}
{{- define "simplyblock.selector" -}}
app.kubernetes.io/name: simplyblock-operator
app.kubernetes.io/component: operator
{{- end -}}

{{/* The operator's image reference. */}}
{{- define "simplyblock.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The csi-addons controller manager's image reference. */}}
{{- define "simplyblock.csiAddonsManagerImage" -}}
{{- with .Values.csiAddons.controllerManager.image -}}
{{ .repository }}:{{ .tag }}
{{- end -}}
{{- end -}}

{{/* The profile, refused unless it is one of the three. */}}
{{- define "simplyblock.profile" -}}
{{- $profile := .Values.deployment.profile -}}
{{- if not (has $profile (list "standalone" "managed" "empty")) -}}
{{- fail (printf "deployment.profile %q is not a profile: choose standalone (the operator installs the control plane here), managed (it runs elsewhere: set controlplane.managed.endpoint) or empty (the operator alone)" $profile) -}}
{{- end -}}
{{- $profile -}}
{{- end -}}

{{/* The managed profile's endpoint, refused when missing, loopback or link-local. */}}
{{- define "simplyblock.managedEndpoint" -}}
{{- $endpoint := .Values.controlplane.managed.endpoint -}}
{{- if not $endpoint -}}
{{- fail "deployment.profile managed needs controlplane.managed.endpoint, the control plane's URL (https://host[:port])" -}}
{{- end -}}
{{- if not (regexMatch "^https?://[^\\s/?#]+(/[^\\s?#]*)?$" $endpoint) -}}
{{- fail (printf "controlplane.managed.endpoint %q is not a URL: write https://host[:port]" $endpoint) -}}
{{- end -}}
{{- if regexMatch "(?i)^https?://([^/@]*@)?(localhost|127\\.[0-9.]+|0\\.0\\.0\\.0|\\[::1\\]|169\\.254\\.[0-9.]+|\\[fe[89ab][0-9a-f]?:[^\\]]*\\])([:/].*)?$" $endpoint -}}
{{- fail (printf "controlplane.managed.endpoint %q is a loopback or link-local address, which reaches the operator's own pod or the node's metadata service: give the control plane's routable address" $endpoint) -}}
{{- end -}}
{{- if and (not (hasPrefix "https://" $endpoint)) (not .Values.controlplane.managed.insecure) -}}
{{- fail (printf "controlplane.managed.endpoint %q is not https://, and every request carries the control plane's bearer token: give its https:// URL, or set controlplane.managed.insecure=true for a control plane without TLS on a trusted network" $endpoint) -}}
{{- end -}}
{{- $endpoint -}}
{{- end -}}

{{/* The bindings of the CSI driver's ClusterRoles (csi-rbac.yaml), which the operator reads. */}}
{{- define "simplyblock.csiClusterRoleBindings" -}}
- simplyblock-operator-csi-node
- simplyblock-operator-csi-provisioner
- simplyblock-operator-csi-attacher
- simplyblock-operator-csi-resizer
- simplyblock-operator-csi-snapshotter
- simplyblock-operator-csi-health-monitor
- simplyblock-operator-csi-addons
- simplyblock-operator-csi-controller-plugin
{{- end -}}

{{/* The namespace whose storage objects the operator serves. */}}
{{- define "simplyblock.servedNamespace" -}}
{{- .Values.operator.watchNamespace | default .Release.Namespace -}}
{{- end -}}

{{/* The names of the chart's CRDs (crds/), as a YAML list; a test holds it to the types. */}}
{{- define "simplyblock.crdNames" -}}
- clusterdeploymentconfigs.storage.simplyblock.io
- controlplaneops.storage.simplyblock.io
- controlplanes.storage.simplyblock.io
- operatorops.storage.simplyblock.io
- persistentvolumeops.storage.simplyblock.io
- simplyblockdrivers.storage.simplyblock.io
- storagebackupops.storage.simplyblock.io
- storagebackuppolicies.storage.simplyblock.io
- storagebackups.storage.simplyblock.io
- storageclusterops.storage.simplyblock.io
- storageclusters.storage.simplyblock.io
- storagedeviceops.storage.simplyblock.io
- storagedevices.storage.simplyblock.io
- storagenodeops.storage.simplyblock.io
- storagenodes.storage.simplyblock.io
- storagepoolops.storage.simplyblock.io
- storagepools.storage.simplyblock.io
- storagesitedeployments.storage.simplyblock.io
- testfailovers.storage.simplyblock.io
{{- end -}}
