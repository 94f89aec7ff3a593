# become_root SCRIPT ARGS...: for the scripts that need root (tools/quickstart.sh,
# tools/install-deps.sh, tools/test.sh). Source it; it defines a function only.
# As root it returns 0 at once. Otherwise, when there is a sudo, it runs `bash SCRIPT ARGS...`
# again through sudo, keeping the exported UROCE_* settings, and exits with its status; with no
# sudo (a container, a fresh VM) it returns 1 and the caller says what it cannot do.
become_root() {
  [ "$(id -u)" -eq 0 ] && return 0
  command -v sudo >/dev/null 2>&1 || return 1
  local keep=() v
  for v in $(compgen -e); do [[ $v == UROCE_* ]] && keep+=("$v=${!v}"); done
  exec sudo env "${keep[@]}" bash "$@"
}
