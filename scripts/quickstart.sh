#!/usr/bin/env bash
# ircc's main job on this machine: build ircc, compile a network (a
# reduced-width Swin-T exported by torch's dynamo exporter) through
# `smartmem` and run it on the GPU through wgpu, beside the same network
# compiled with no optimization (`none`). Where there is no GPU, lavapipe
# (Mesa's software Vulkan) stands in; run as root, this installs it.
set -euo pipefail
cd "$(dirname "$0")/.."

# Whether the Vulkan loader finds a driver: a manifest named by the
# variables that replace or extend its search, or one in any folder it
# searches (the loader's documentation: the XDG config folders, /etc, the
# XDG data folders; each holds vulkan/icd.d/*.json).
vulkan_driver_found() {
  local IFS=: f d
  for f in ${VK_DRIVER_FILES:-} ${VK_ICD_FILENAMES:-} ${VK_ADD_DRIVER_FILES:-}; do
    if [ -f "$f" ] || compgen -G "$f/*.json" >/dev/null; then return 0; fi
  done
  for d in "${XDG_CONFIG_HOME:-${HOME:-/root}/.config}" ${XDG_CONFIG_DIRS:-/etc/xdg} /etc \
      "${XDG_DATA_HOME:-${HOME:-/root}/.local/share}" ${XDG_DATA_DIRS:-/usr/local/share:/usr/share}; do
    if compgen -G "$d/vulkan/icd.d/*.json" >/dev/null; then return 0; fi
  done
  return 1
}

if ! vulkan_driver_found; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "no Vulkan driver: installing lavapipe (mesa-vulkan-drivers)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers >/dev/null
  else
    echo "no Vulkan driver found: install one (Debian: apt-get install mesa-vulkan-drivers)" >&2
    exit 1
  fi
fi
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"

# CI runs this with the debug build it already has (IRCC_QUICKSTART_PROFILE=dev).
profile="${IRCC_QUICKSTART_PROFILE:-release}"
cargo build --profile "$profile" --locked -p ircc
if [ "$profile" = dev ]; then ircc=target/debug/ircc; else ircc=target/$profile/ircc; fi
model=tests/models/swin_t_w24_dynamo.onnx
runs="${IRCC_QUICKSTART_RUNS:-10}"
$ircc stats "$model" --pipeline smartmem
for pipeline in none smartmem; do
  $ircc bench "$model" --pipeline "$pipeline" --runs "$runs"
done
