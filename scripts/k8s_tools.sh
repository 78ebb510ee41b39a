#!/usr/bin/env bash
# The offline validator of deploy/k8s (tests/integration/test_k8s_manifests.py):
#   kubeconform, built from its Go module through the Go module proxy, and
#   Kubernetes' JSON schemas in kubeconform's layout ("<version>-standalone-strict/
#   <kind>-<group>-<version>.json"), converted from the OpenAPI spec that the
#   k8s.io/kubernetes Go module ships (api/openapi-spec/swagger.json) by
#   openapi2jsonschema from PyPI, the converter kubeval's and kubeconform's published
#   schema sets were made with, in its --strict mode (additionalProperties: false, so an
#   unknown or misspelt field fails validation).
# Only the Go module proxy and PyPI are needed, once: everything lands under
# ${XDG_CACHE_HOME:-~/.cache}/hookstream-k8s (outside the work tree) and a second run
# does nothing. Prints what it does and is quiet otherwise. About a minute on a fresh
# machine (a Go build, two downloads of 18 MB, two conversions of 6 s).
#
#   scripts/k8s_tools.sh           install what is missing
#   scripts/k8s_tools.sh --print   print kubeconform=..., schemas=..., versions=...
#                                  for the test; exit 1, installing nothing, if missing
set -euo pipefail

KUBECONFORM_VERSION=v0.8.0
# The oldest and the newest Kubernetes minor releases still supported: the manifests
# must be valid for both.
K8S_VERSIONS=(v1.35.4 v1.37.2)
# openapi2jsonschema 0.9.1 pins PyYAML < 6, which does not build on Python 3.11; its
# use of PyYAML (yaml.load with SafeLoader) is the same in 6, so it is installed without
# its pins and these are given instead.
O2J_PACKAGES=(openapi2jsonschema==0.9.1 click==7.1.2 colorama==0.4.6 jsonref==0.2 pyyaml==6.0.2)

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/hookstream-k8s"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The project's interpreter once bootstrap made it (it has venv and ensurepip, which a
# bare Debian python3 lacks without python3-venv).
PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || PY=python3
KUBECONFORM="$CACHE/bin/kubeconform-$KUBECONFORM_VERSION"
SCHEMAS="$CACHE/schemas"
O2J_VENV="$CACHE/openapi2jsonschema-venv"
# The kinds converted: those deploy/k8s uses and the ones it is likely to use next. The
# spec is cut down to them and the definitions they refer to before the conversion
# (74 s -> 6 s a version; the schemas of these kinds come out byte for byte the same as
# from the whole spec). A kind added to deploy/k8s and missing here fails the test
# ("could not find schema for ..."): add it; the schemas are then made again.
KINDS=(apps/v1/Deployment apps/v1/StatefulSet batch/v1/Job batch/v1/CronJob v1/Service
  v1/ConfigMap v1/Secret v1/Namespace v1/ServiceAccount v1/PersistentVolumeClaim
  networking.k8s.io/v1/NetworkPolicy networking.k8s.io/v1/Ingress
  policy/v1/PodDisruptionBudget autoscaling/v2/HorizontalPodAutoscaler
  rbac.authorization.k8s.io/v1/Role rbac.authorization.k8s.io/v1/RoleBinding)

say() { printf 'k8s_tools: %s\n' "$*"; }
die() { printf 'k8s_tools: error: %s\n' "$*" >&2; exit 1; }

schema_dir() { echo "$SCHEMAS/$1-standalone-strict"; }

stamp() { echo "k8s.io/kubernetes@$1 api/openapi-spec/swagger.json: ${KINDS[*]}"; }

schemas_complete() {  # the conversion finished for this version and these kinds
  [ "$(cat "$(schema_dir "$1")/.complete" 2>/dev/null)" = "$(stamp "$1")" ]
}

schema_file() {  # apps/v1/Deployment -> deployment-apps-v1, v1/Service -> service-v1
  local kind="${1##*/}" rest="${1%/*}"
  local version="${rest##*/}" group="${rest%/*}"
  if [ "$group" = "$rest" ]; then echo "${kind,,}-$version"
  else echo "${kind,,}-${group%%.*}-$version"; fi
}

# Keeps the definitions of the given kinds and of everything they refer to ($ref).
cut_spec() {  # cut_spec SPEC OUT KIND...
  "$PY" - "$@" <<'PY'
import json
import sys

src, dst, *kinds = sys.argv[1:]
wanted = {tuple(k.split("/")) if k.count("/") == 2 else ("", *k.split("/")) for k in kinds}
spec = json.load(open(src))
defs = spec["definitions"]
todo = [name for name, d in defs.items()
        if any((g["group"], g["version"], g["kind"]) in wanted
               for g in d.get("x-kubernetes-group-version-kind", []))]
found = {(g["group"], g["version"], g["kind"])
         for name in todo for g in defs[name]["x-kubernetes-group-version-kind"]}
if wanted - found:
    sys.exit(f"not in {src}: {sorted(wanted - found)}")


def refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value.rsplit("/", 1)[1]
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


keep = set()
while todo:
    name = todo.pop()
    if name not in keep:
        keep.add(name)
        todo.extend(refs(defs[name]))
with open(dst, "w") as out:
    json.dump({"swagger": spec["swagger"], "info": spec.get("info", {}),
               "definitions": {name: defs[name] for name in sorted(keep)}}, out)
PY
}

missing() {
  local v
  [ -x "$KUBECONFORM" ] || echo "kubeconform $KUBECONFORM_VERSION"
  for v in "${K8S_VERSIONS[@]}"; do
    schemas_complete "$v" || echo "schemas $v"
  done
}

if [ "${1:-}" = "--print" ]; then
  gaps="$(missing)"
  if [ -n "$gaps" ]; then
    printf 'k8s_tools: missing: %s; run scripts/k8s_tools.sh\n' "$(echo "$gaps" | paste -sd, -)" >&2
    exit 1
  fi
  echo "kubeconform=$KUBECONFORM"
  echo "schemas=$SCHEMAS"
  echo "versions=${K8S_VERSIONS[*]}"
  exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [--print]"

command -v go >/dev/null 2>&1 || die "go not found (scripts/bootstrap.sh installs it)"
mkdir -p "$CACHE/bin" "$SCHEMAS"
work="$(mktemp -d "${TMPDIR:-/tmp}/hookstream-k8s.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# ---------------------------------------------------------------- kubeconform
if [ ! -x "$KUBECONFORM" ]; then
  say "go install github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION"
  # The machine's own Go (GOTOOLCHAIN=local): kubeconform needs go >= 1.26.
  (cd "$work" && GOTOOLCHAIN=local GOBIN="$work/bin" GOFLAGS=-buildvcs=false \
    go install "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION")
  mv "$work/bin/kubeconform" "$KUBECONFORM"
fi

# ---------------------------------------------------------------- schemas
need_schemas=0
for v in "${K8S_VERSIONS[@]}"; do schemas_complete "$v" || need_schemas=1; done
if [ "$need_schemas" -eq 1 ]; then
  if [ ! -x "$O2J_VENV/bin/openapi2jsonschema" ]; then
    say "pip install ${O2J_PACKAGES[*]} into $O2J_VENV"
    rm -rf "$O2J_VENV"
    "$PY" -m venv "$O2J_VENV"
    "$O2J_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
      "${O2J_PACKAGES[@]}"
  fi
  for v in "${K8S_VERSIONS[@]}"; do
    schemas_complete "$v" && continue
    say "go mod download k8s.io/kubernetes@$v (its api/openapi-spec/swagger.json)"
    module_dir="$(cd "$work" && GOTOOLCHAIN=local GOFLAGS=-mod=mod \
      go mod download -json "k8s.io/kubernetes@$v" |
      "$PY" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
    spec="$module_dir/api/openapi-spec/swagger.json"
    [ -f "$spec" ] || die "no $spec in k8s.io/kubernetes@$v"
    cut_spec "$spec" "$work/swagger-$v.json" "${KINDS[@]}"
    say "openapi2jsonschema --expanded --kubernetes --stand-alone --strict ($v)"
    out="$v-standalone-strict"
    # openapi2jsonschema resolves its $refs against "<cwd>/<output>": a relative output.
    (cd "$work" && "$O2J_VENV/bin/openapi2jsonschema" -o "$out" --expanded --kubernetes \
      --stand-alone --strict "swagger-$v.json" >"$work/$v.log" 2>&1) ||
      { cat "$work/$v.log" >&2; die "openapi2jsonschema failed for $v"; }
    for gvk in "${KINDS[@]}"; do
      kind_file="$(schema_file "$gvk").json"
      [ -s "$work/$out/$kind_file" ] ||
        { tail -n 20 "$work/$v.log" >&2; die "openapi2jsonschema made no $kind_file for $v"; }
    done
    rm -rf "$(schema_dir "$v")"
    mv "$work/$out" "$(schema_dir "$v")"
    stamp "$v" >"$(schema_dir "$v")/.complete"
  done
fi
