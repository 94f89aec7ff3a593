# Runs inside the rxe-vm guest (cwd /host = the VM's run directory on the host, over 9p).
# A tiny job runner: the host drops job.N.sh files into the share; the agent runs them one
# after the other (N = 0, 1, 2, ...), writing job.N.out and then job.N.rc. A job file whose
# first line is "exit" ends the agent (and the guest powers off). One boot serves a whole
# interop suite, since booting under software emulation is the slow part.
. /etc/rxe.env
export RXE_NAME RXE_DEV RXE_IP RXE_GID
echo "agent: $RXE_DEV gid index $RXE_GID on $RXE_IP, $(nproc) cpu"
touch /host/agent-ready
n=0
while :; do
  job=/host/job.$n.sh
  while [ ! -e "$job" ]; do sleep 0.05; done
  [ "$(head -n1 "$job")" = exit ] && { echo "agent: exit after $n jobs"; break; }
  bash "$job" > "/host/job.$n.out" 2>&1
  echo $? > "/host/job.$n.rc.tmp"
  mv "/host/job.$n.rc.tmp" "/host/job.$n.rc"
  n=$((n + 1))
done
