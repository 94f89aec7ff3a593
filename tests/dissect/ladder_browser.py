#!/usr/bin/python3
"""uroce-dissect --ladder in a real browser: headless Chromium loads the page and the checks
read the DOM it built (not pixels). The expected figures come from uroce-dissect's other modes
on the same capture.

  - every RoCE (and malformed) frame is one arrow with its frame number, and only those;
  - a connection's view holds exactly the frames of its request stream and their responses;
  - the NAK and each retransmission are arrows of their own class (colour and legend);
  - hovering an arrow shows exactly what --explain prints for that packet;
  - collapsed, runs of in-order requests become one row that says how many it stands for.

Usage: ladder_browser.py UROCE_DISSECT PCAP_DIR. Exit 77 (skipped) without chromium.
"""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

dissect, pcaps = sys.argv[1], sys.argv[2]
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if not chromium:
    print("SKIP: chromium is not installed (tools/install-deps.sh installs it)")
    sys.exit(77)
tmp = tempfile.mkdtemp(prefix="uroce-ladder-")
failed = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failed.append(what)


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def dom(page, fragment=""):
    """The DOM after the page's script ran, as Chromium serialises it."""
    out = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + tmp + "/profile",
         "--virtual-time-budget=10000", "--dump-dom", "file://" + page + fragment],
        check=True, capture_output=True, text=True, timeout=120).stdout
    return out


def arrows(d):
    """(classes, frame or None, group size or None, conn) of every packet arrow."""
    out = []
    for m in re.finditer(r'<g class="pkt ([a-z]+)" data-conn="(-?\d+)"(?: data-frame="(\d+)")?(?: data-frames="(\d+)")?', d):
        out.append((m.group(1), int(m.group(3)) if m.group(3) else None,
                    int(m.group(4)) if m.group(4) else None, int(m.group(2))))
    return out


try:
    cap = os.path.join(pcaps, "kernel-rxe-lossy_send_bw_4096-head.pcap")
    page = os.path.join(tmp, "ladder.html")
    run(dissect, "--ladder", page, cap)
    lines = run(dissect, cap).splitlines()
    explain = run(dissect, "--explain", cap)
    roce = [l for l in lines[:-1] if re.match(r"\s*\d+\s", l) and " TCP " not in l and
            " ARP " not in l and " UDP " not in l and " ICMP" not in l and "non-IP" not in l]
    frames = [int(l.split()[0]) for l in roce]

    # 1. Every packet, uncollapsed.
    full = arrows(dom(page, "#collapse=0"))
    check([a[1] for a in full] == frames,
          f"uncollapsed: {len(full)} arrows, one per RoCE frame in capture order ({len(frames)} expected)")

    # 2. The NAK and the retransmissions are marked.
    nak_frames = [int(l.split()[0]) for l in roce if " NAK " in l]
    retx_frames = [int(l.split()[0]) for l in roce if "[retransmission]" in l]
    check(len(nak_frames) > 0 and [a[1] for a in full if a[0] == "nak"] == nak_frames,
          f"NAK arrows: frames {nak_frames} marked 'nak'")
    check(len(retx_frames) > 0 and [a[1] for a in full if a[0] == "retx"] == retx_frames,
          f"retransmissions: {len(retx_frames)} arrows marked 'retx'")

    # 3. One connection at a time: its requests (A -> B, QP x) and the responses paired with
    # them (B -> A, QP y), on a capture with several QPs (ibv_srq_pingpong: 16 of them).
    cap2 = os.path.join(pcaps, "kernel-rxe-srq_pingpong-head.pcap")
    page2 = os.path.join(tmp, "ladder2.html")
    run(dissect, "--ladder", page2, cap2)
    lines2 = run(dissect, cap2).splitlines()
    d2 = dom(page2, "#collapse=0")
    conns = json.loads(html.unescape(re.search(r'<script type="application/json" id="meta">(.*?)</script>', d2, re.S).group(1)))["conns"]
    check(len(conns) >= 4, f"{len(conns)} connections listed in the page")
    for k in range(4):
        m = re.match(r"(\S+) → (\S+) QP 0x([0-9a-f]{6}), responses to QP 0x([0-9a-f]{6})", conns[k])
        a, b, x, y = m.group(1), m.group(2), int(m.group(3), 16), int(m.group(4), 16)
        want = []
        for l in lines2[:-1]:
            f = l.split()
            q = re.search(r" qp=0x([0-9a-f]{6}) ", l)
            if not q or "ICRC BAD" in l:
                continue
            response = re.search(r"_(ACKNOWLEDGE|READ_RESPONSE_\w+) ", l) is not None
            key = (f[2], f[4], int(q.group(1), 16))
            # B -> A to QP y is also B's own requests to A's QP y, when B sends too.
            if (key == (a, b, x) and not response) or (key == (b, a, y) and response):
                want.append(int(f[0]))
        got = arrows(dom(page2, f"#conn={k}&collapse=0"))
        check(len(want) > 0 and [g[1] for g in got] == want and all(g[3] == k for g in got),
              f"connection {k} ({a} QP 0x{x:06x} <-> {b} QP 0x{y:06x}): {len(got)} arrows, {len(want)} of its frames in the capture")

    # 3b. READ responses bracketed with their request: one bracket per READ request answered.
    cap3 = os.path.join(pcaps, "kernel-rxe-read_bw_4096-head.pcap")
    page3 = os.path.join(tmp, "ladder3.html")
    run(dissect, "--ladder", page3, cap3)
    answered = sorted(set(int(n) for n in re.findall(r"READ response segment \d+/\d+ for READ request PSN \d+ \(#(\d+)", run(dissect, "--explain", cap3))))
    drawn = sorted(int(n) for n in re.findall(r'class="bracket" data-request="(\d+)"', dom(page3, "#collapse=0")))
    check(len(answered) > 0 and drawn == answered,
          f"READ: {len(drawn)} brackets, one per answered READ request ({len(answered)} in --explain)")

    # 3c. The verbs side (CAPTURE.verbs, recorded by uroce with the capture): one row per
    # event, each post before the packets it caused and each send completion after the ACK.
    cap4 = os.path.join(pcaps, "uroce-rc_pingpong-verbs.pcap")
    page4 = os.path.join(tmp, "ladder4.html")
    run(dissect, "--ladder", page4, cap4)
    events = [l.split("\t") for l in open(cap4 + ".verbs") if l[0].isdigit()]
    d4 = dom(page4, "#collapse=0")
    rows4 = re.findall(r'<g class="(pkt|verb) ([a-z]+)"[^>]*>(.*?)</g>', d4, re.S)
    verbs = [r for r in rows4 if r[0] == "verb"]
    check(len(verbs) == len(events) and len(verbs) > 0,
          f"verbs events: {len(verbs)} rows for {len(events)} lines of the .verbs file")
    text = lambda r: html.unescape(re.sub(r"<[^>]+>", " ", r[2]))
    firsts = [i for i, r in enumerate(rows4) if r[0] == "verb" and "post_send SEND" in text(r)]
    after_post = [next((rows4[j] for j in range(i + 1, len(rows4)) if rows4[j][0] == "pkt"), None) for i in firsts]
    check(len(firsts) == sum(1 for e in events if e[1] == "post_send") and
          all(p is not None and "RC_SEND_FIRST" in text(p) for p in after_post),
          f"each of the {len(firsts)} post_send rows comes just before its SEND_FIRST")
    comps = [i for i, r in enumerate(rows4) if r[0] == "verb" and "completion SEND" in text(r)]
    before = [next((rows4[j] for j in range(i - 1, -1, -1) if rows4[j][0] == "pkt"), None) for i in comps]
    check(len(comps) > 0 and all(b is not None and b[1] == "ack" for b in before),
          f"each of the {len(comps)} send completions comes after the ACK that made it")

    # 4. Hover shows --explain's text for that packet.
    blocks = {}
    for b in re.split(r"\n\n", explain):
        mm = re.match(r"#(\d+)  ", b)
        if mm:
            blocks[int(mm.group(1))] = b
    for frame in [frames[0], nak_frames[0], retx_frames[0]]:
        d = dom(page, f"#hover={frame}")
        shown = html.unescape(re.search(r'<pre id="selftest">(.*?)</pre>', d, re.S).group(1))
        want_text = blocks[frame]
        # --explain follows a RoCE packet with the one-line forms of the non-RoCE frames after it.
        want_text = "\n".join(l for l in want_text.split("\n") if not re.match(r"#\d+ .*\(not RoCE: skipped\)", l))
        check(shown.strip() == want_text.strip(), f"hover on frame {frame} shows its --explain text ({len(shown)} chars)")

    # 5. Collapsed: fewer rows, and the groups account for every frame.
    col = arrows(dom(page))
    singles = [a for a in col if a[1] is not None]
    groups = [a for a in col if a[2] is not None]
    check(len(col) < len(full) and len(groups) > 0 and
          len(singles) + sum(g[2] for g in groups) == len(full),
          f"collapsed: {len(col)} rows ({len(groups)} groups standing for {sum(g[2] for g in groups)} requests) for {len(full)} packets")
    check(all(a[0] != "req" or a[1] is not None for a in col) and
          set(a[1] for a in full if a[0] != "req") <= set(a[1] for a in singles),
          "collapsed: every packet that is not an in-order request keeps its own arrow")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

sys.exit(1 if failed else 0)
