#!/usr/bin/env bash
# Collects what is needed to diagnose a simplyblock installation into one .tar.gz: every
# storage.simplyblock.io object, the CRDs' versions, the namespace's events, workloads and
# logs, the CSI driver's classes, volumes and attachments, and the Helm release's values.
# Secrets are listed by name and type only: their data never enters the bundle.
#
# Usage: scripts/support-bundle.sh [-n NAMESPACE] [-o OUT.tar.gz] [-l LINES]
set -euo pipefail

usage() {
	cat <<'EOF'
Usage: scripts/support-bundle.sh [-n NAMESPACE] [-o OUT.tar.gz] [-l LINES]

Collects a support bundle of a simplyblock installation with kubectl (and helm, when it is
installed) and writes it as one .tar.gz. kubectl talks to the cluster of the current
context (set KUBECONFIG, or switch context first).

  -n NAMESPACE   the namespace the operator runs in (default: simplyblock)
  -o OUT.tar.gz  the archive to write (default: simplyblock-support-<time>.tar.gz here)
  -l LINES       how many of the latest log lines to keep of each container of the
                 pods other than the operator's and the CSI driver's: the control
                 plane, its database, the storage nodes, the Jobs (default: 5000).
                 The operator's and the CSI driver's logs are kept whole.
  -h             this help

What goes in: every storage.simplyblock.io object of every namespace (YAML), the CRDs'
versions and conversion, the namespace's events, pods, workloads, Services, Leases and
claims, the current and previous logs of the containers of the namespace's pods, the
StorageClasses, PersistentVolumes, VolumeAttachments and snapshot objects of the CSI
driver, the nodes, the chart's admission webhooks and policies, and the Helm release's
values. Never in: the data of a Secret (each Secret's name and type only).

A command that fails does not stop the collection: its error goes to errors.txt in the
bundle, and the bundle is written all the same.
EOF
}

NAMESPACE=simplyblock
OUT=""
TAIL_LINES=5000
while getopts ":n:o:l:h" opt; do
	case "$opt" in
	n) NAMESPACE=$OPTARG ;;
	o) OUT=$OPTARG ;;
	l) TAIL_LINES=$OPTARG ;;
	h)
		usage
		exit 0
		;;
	:)
		echo "support-bundle: -$OPTARG needs a value" >&2
		usage >&2
		exit 2
		;;
	*)
		echo "support-bundle: unknown option -$OPTARG" >&2
		usage >&2
		exit 2
		;;
	esac
done
shift $((OPTIND - 1))
if [[ $# -gt 0 ]]; then
	echo "support-bundle: unexpected argument: $1" >&2
	usage >&2
	exit 2
fi
if ! [[ $TAIL_LINES =~ ^[1-9][0-9]*$ ]]; then
	echo "support-bundle: -l takes a positive number of lines, not '$TAIL_LINES'" >&2
	exit 2
fi
if ! command -v kubectl >/dev/null 2>&1; then
	echo "support-bundle: kubectl is not on PATH; install it and point it at the cluster (KUBECONFIG)" >&2
	exit 1
fi

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
NAME="simplyblock-support-$STAMP"
if [[ -z $OUT ]]; then
	OUT="$NAME.tar.gz"
fi
case "$OUT" in
/*) ;;
*) OUT="$PWD/$OUT" ;;
esac
if [[ ! -d $(dirname "$OUT") ]]; then
	echo "support-bundle: the directory of $OUT does not exist" >&2
	exit 2
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/$NAME"
mkdir -p "$ROOT"
ERRORS="$ROOT/errors.txt"
WARNINGS="$ROOT/warnings.txt"
: >"$ERRORS"
: >"$WARNINGS"
# Each request gives up after this long, so one unresponsive API cannot hang the script.
TIMEOUT=${SUPPORT_BUNDLE_REQUEST_TIMEOUT:-60s}

kc() {
	kubectl --request-timeout="$TIMEOUT" "$@"
}

ns() {
	kc --namespace "$NAMESPACE" "$@"
}

# record FILE COMMAND STATUS STDERR-FILE: appends a failed command and its message to FILE.
record() {
	{
		printf '$ %s\n' "$2"
		if [[ -n $3 ]]; then
			printf '(exit status %s)\n' "$3"
		fi
		cat "$4"
		printf '\n'
	} >>"$1"
}

# collect FILE COMMAND...: COMMAND's output into FILE (a path inside the bundle). A failure
# is recorded in errors.txt with the command and its message, and the collection goes on.
collect() {
	local file="$ROOT/$1"
	shift
	mkdir -p "$(dirname "$file")"
	local err status
	err=$(mktemp "$WORK/stderr.XXXXXX")
	if "$@" >"$file" 2>"$err"; then
		# An empty list is an answer, not a warning.
		if grep -qv '^No resources found' "$err"; then
			record "$WARNINGS" "$*" "" "$err"
		fi
	else
		status=$?
		record "$ERRORS" "$*" "$status" "$err"
		if [[ ! -s $file ]]; then
			rm -f "$file"
		fi
	fi
	rm -f "$err"
	return 0
}

# lines COMMAND...: COMMAND's output, or none when it fails (the failure recorded).
lines() {
	local err status
	err=$(mktemp "$WORK/stderr.XXXXXX")
	if "$@" 2>"$err"; then
		:
	else
		status=$?
		record "$ERRORS" "$*" "$status" "$err"
	fi
	rm -f "$err"
	return 0
}

# say FILE TEXT: writes TEXT into FILE (a path inside the bundle).
say() {
	mkdir -p "$(dirname "$ROOT/$1")"
	printf '%s\n' "$2" >"$ROOT/$1"
}

echo "support-bundle: collecting namespace $NAMESPACE" >&2

# ---- the cluster ----
collect cluster/version.yaml kc version -o yaml
collect cluster/nodes.txt kc get nodes -o wide --show-labels
collect cluster/nodes.yaml kc get nodes -o yaml
collect cluster/namespace.yaml kc get namespace "$NAMESPACE" -o yaml

# ---- the storage.simplyblock.io API ----
collect api/api-resources.txt kc api-resources --api-group=storage.simplyblock.io -o wide
collect api/crd-versions.txt kc get customresourcedefinitions.apiextensions.k8s.io -o jsonpath='{range .items[?(@.spec.group=="storage.simplyblock.io")]}{.metadata.name}{"\n"}  versions:{range .spec.versions[*]} {.name}(served={.served},storage={.storage}){end}{"\n"}  storedVersions: {.status.storedVersions}{"\n"}  conversion: {.spec.conversion.strategy} {.spec.conversion.webhook.clientConfig.service.namespace}/{.spec.conversion.webhook.clientConfig.service.name}{.spec.conversion.webhook.clientConfig.service.path}{"\n"}  helm release: {.metadata.annotations.meta\.helm\.sh/release-name} ({.metadata.annotations.meta\.helm\.sh/release-namespace}), resource-policy: {.metadata.annotations.helm\.sh/resource-policy}{"\n"}  conditions:{range .status.conditions[*]} {.type}={.status}{end}{"\n"}{end}'

found=0
while IFS= read -r resource; do
	if [[ -z $resource ]]; then
		continue
	fi
	found=1
	collect "storage/$resource.txt" kc get "$resource" --all-namespaces -o wide
	collect "storage/$resource.yaml" kc get "$resource" --all-namespaces -o yaml
done < <(lines kc api-resources --api-group=storage.simplyblock.io -o name)
if [[ $found -eq 0 ]]; then
	say storage/NONE.txt "the API server serves no resource of storage.simplyblock.io: the CRDs are not installed (or could not be listed, see errors.txt)"
fi

# ---- the namespace ----
collect namespace/events.txt ns get events -o wide
collect namespace/events.yaml ns get events.events.k8s.io -o yaml
# The events of a cluster-scoped object (PersistentVolumeOps) are written in namespace default.
collect namespace/events-persistentvolumeops.txt kc --namespace default get events -o wide --field-selector involvedObject.kind=PersistentVolumeOps
collect namespace/overview.txt ns get pods,deployments,daemonsets,statefulsets,jobs,services,leases,persistentvolumeclaims,poddisruptionbudgets -o wide
for kind in pods deployments daemonsets statefulsets jobs services leases persistentvolumeclaims serviceaccounts poddisruptionbudgets; do
	collect "namespace/$kind.yaml" ns get "$kind" -o yaml
done
# Secrets: name, type and creation time only; their data never.
collect namespace/secrets.txt ns get secrets -o 'custom-columns=NAME:.metadata.name,TYPE:.type,CREATED:.metadata.creationTimestamp'
collect namespace/configmaps.txt ns get configmaps -o 'custom-columns=NAME:.metadata.name,CREATED:.metadata.creationTimestamp'
# The ConfigMaps the operator and the chart write: configuration, the allowed registries,
# the upgrade's record, discovery's probe reports.
while IFS= read -r cm; do
	case "$cm" in
	simplyblock-* | sb-nodeprobe-*) collect "namespace/configmaps/$cm.yaml" ns get configmap "$cm" -o yaml ;;
	esac
done < <(lines ns get configmaps -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
# What the operator asks other operators for, where their APIs are served.
collect namespace/foundationdbclusters.yaml ns get foundationdbclusters.apps.foundationdb.org -o yaml
collect namespace/cert-manager.yaml ns get certificates.cert-manager.io,issuers.cert-manager.io,certificaterequests.cert-manager.io -o yaml

# ---- logs ----
# pod_logs POD LIMIT: the current log of every container of POD (init containers too) and,
# after a restart, the previous one; LIMIT "all" keeps the whole log, else its last lines.
pod_logs() {
	local pod=$1 limit=$2 tail_flag=""
	if [[ $limit != all ]]; then
		tail_flag="--tail=$limit"
	fi
	local line container restarts
	while IFS= read -r line; do
		if [[ -z $line ]]; then
			continue
		fi
		container=${line%%=*}
		restarts=${line#*=}
		collect "logs/$pod/$container.log" ns logs "$pod" --container "$container" --timestamps ${tail_flag:+"$tail_flag"}
		if [[ $restarts =~ ^[0-9]+$ ]] && [[ $restarts -gt 0 ]]; then
			collect "logs/$pod/$container.previous.log" ns logs "$pod" --container "$container" --timestamps --previous ${tail_flag:+"$tail_flag"}
		fi
	done < <(lines ns get pod "$pod" -o jsonpath='{range .status.initContainerStatuses[*]}{.name}={.restartCount}{"\n"}{end}{range .status.containerStatuses[*]}{.name}={.restartCount}{"\n"}{end}')
}

pods_with() {
	lines ns get pods --selector "$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'
}

# The operator's pods and any other pod with its name label, then the CSI driver's
# controller and node plugins: their logs whole.
WHOLE=$'\n'
while IFS= read -r pod; do
	if [[ -n $pod && $WHOLE != *$'\n'"$pod"$'\n'* ]]; then
		WHOLE+="$pod"$'\n'
		pod_logs "$pod" all
	fi
done < <(
	pods_with 'app.kubernetes.io/name=simplyblock-operator'
	pods_with 'app in (csi-controller,simplyblock-csi-node)'
)
# Every other pod of the namespace: the control plane, its database and object store, the
# storage nodes, discovery's probe Jobs, the validation Jobs of volume moves.
while IFS= read -r pod; do
	if [[ -n $pod && $WHOLE != *$'\n'"$pod"$'\n'* ]]; then
		pod_logs "$pod" "$TAIL_LINES"
	fi
done < <(lines ns get pods -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')

# ---- the CSI driver's cluster-wide objects ----
DRIVER=$(ns get simplyblockdrivers.storage.simplyblock.io -o jsonpath='{.items[0].spec.driverName}' 2>/dev/null || true)
DRIVER=${DRIVER:-csi.simplyblock.io}
collect csi/csidriver.yaml kc get csidrivers.storage.k8s.io "$DRIVER" -o yaml
collect csi/csinodes.yaml kc get csinodes.storage.k8s.io -o yaml

# Each RESOURCE:FIELD names the objects of the driver by FIELD being its name.
for spec in \
	storageclasses.storage.k8s.io:provisioner \
	persistentvolumes:spec.csi.driver \
	volumeattachments.storage.k8s.io:spec.attacher \
	volumesnapshotclasses.snapshot.storage.k8s.io:driver \
	volumesnapshotcontents.snapshot.storage.k8s.io:spec.driver; do
	resource=${spec%%:*}
	field=${spec#*:}
	short=${resource%%.*}
	names=()
	while IFS= read -r object; do
		if [[ -n $object ]]; then
			names+=("$object")
		fi
	done < <(lines kc get "$resource" -o jsonpath="{range .items[?(@.$field==\"$DRIVER\")]}{.metadata.name}{\"\\n\"}{end}")
	if [[ ${#names[@]} -eq 0 ]]; then
		say "csi/$short.txt" "no $short of driver $DRIVER (or the resource is not served: see errors.txt)"
		continue
	fi
	collect "csi/$short.txt" kc get "$resource" "${names[@]}" -o wide
	collect "csi/$short.yaml" kc get "$resource" "${names[@]}" -o yaml
done

# ---- admission ----
collect admission/validatingwebhookconfiguration.yaml kc get validatingwebhookconfigurations.admissionregistration.k8s.io simplyblock-operator -o yaml
while IFS= read -r policy; do
	case "$policy" in
	simplyblock-*)
		collect "admission/$policy.yaml" kc get validatingadmissionpolicies.admissionregistration.k8s.io "$policy" -o yaml
		collect "admission/$policy-binding.yaml" kc get validatingadmissionpolicybindings.admissionregistration.k8s.io "$policy" -o yaml
		;;
	esac
done < <(lines kc get validatingadmissionpolicies.admissionregistration.k8s.io -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')

# ---- helm ----
if command -v helm >/dev/null 2>&1; then
	collect helm/version.txt helm version
	# Every state a release can be stuck in (flags Helm 3 and Helm 4 both take).
	states=(--deployed --failed --pending --uninstalling)
	collect helm/releases.txt helm list --namespace "$NAMESPACE" "${states[@]}"
	while IFS= read -r release; do
		if [[ -n $release ]]; then
			collect "helm/$release/values.yaml" helm get values "$release" --namespace "$NAMESPACE" -o yaml
			collect "helm/$release/history.txt" helm history "$release" --namespace "$NAMESPACE"
		fi
	done < <(lines helm list --namespace "$NAMESPACE" "${states[@]}" --short)
else
	say helm/NONE.txt "helm is not on PATH: the release's values were not collected"
fi

# ---- the archive ----
{
	printf 'simplyblock support bundle\n'
	printf 'created: %s\n' "$STAMP"
	printf 'namespace: %s\n' "$NAMESPACE"
	printf 'CSI driver: %s\n' "$DRIVER"
	printf 'kubectl context: %s\n' "$(kubectl config current-context 2>/dev/null || printf 'unknown')"
	printf 'log lines kept per container, other than the operator and the CSI driver: %s\n' "$TAIL_LINES"
	if [[ -s $ERRORS ]]; then
		printf 'some commands failed: see errors.txt\n'
	else
		printf 'every command succeeded\n'
	fi
} >"$ROOT/README.txt"
for file in "$ERRORS" "$WARNINGS"; do
	if [[ ! -s $file ]]; then
		rm -f "$file"
	fi
done

tar -C "$WORK" -czf "$OUT" "$NAME"
echo "support-bundle: wrote $OUT" >&2
if [[ -f $ERRORS ]]; then
	echo "support-bundle: some commands failed; their errors are in errors.txt inside the bundle" >&2
fi
