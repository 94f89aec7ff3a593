"""pyverbs (rdma-core's Python binding, unmodified) on uroce: device list, context, device and
port attributes, GIDs, PD, MR and CQ. Run by verbs_tools.sh with /usr/bin/python3."""
import sys

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.pd import PD

expect_ip = sys.argv[1]  # e.g. 10.97.0.1
devs = d.get_device_list()
assert [x.name.decode() for x in devs] == ["uroce0"], devs
ctx = d.Context(name="uroce0")
attr = ctx.query_device()
assert attr.max_qp > 0 and attr.phys_port_cnt == 1, attr
port = ctx.query_port(1)
assert port.state == e.IBV_PORT_ACTIVE and port.link_layer == e.IBV_LINK_LAYER_ETHERNET, port
gid = str(ctx.query_gid(1, 1))
a, b, c, dd = (int(x) for x in expect_ip.split("."))
assert gid == "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % (a, b, c, dd), gid
pd = PD(ctx)
mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
lkey = mr.lkey
assert lkey == mr.rkey and lkey != 0
cq = CQ(ctx, 16)
cq.close()
mr.close()
pd.close()
ctx.close()
print("ok: pyverbs: device, port (active, Ethernet), GID %s, PD, MR 0x%x, CQ" % (gid, lkey))
