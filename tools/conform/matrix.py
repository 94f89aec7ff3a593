#!/usr/bin/env python3
# Regenerates the matrix in docs/conformance.md from the cases and tests/conform/rxe.expected.
import glob,os,re
rxe=dict(l.split() for l in open('tests/conform/rxe.expected') if l.strip() and not l.startswith('#'))
rows=["| case | what it checks | clause | uroce | rxe |","|---|---|---|---|---|"]
for f in sorted(glob.glob('tools/conform/cases/*.case')):
    name=os.path.basename(f)[:-5]
    title=clause=''
    for l in open(f):
        if l.startswith('title ') and not title: title=l[6:].strip()
        if l.startswith('clause ') and not clause: clause=l[7:].strip()
    m=re.match(r'(IBA (?:annex )?[0-9A-Z.]+)',clause)
    cl=m.group(1) if m else clause
    r=rxe.get(name,'?')
    rs='pass' if r=='PASS' else f'**{r.lower()}** ([why](#rxe-{name.replace(".","-")}))'
    rows.append(f"| `{name}` | {title.replace('|','/')} | {cl} | pass | {rs} |")
p='docs/conformance.md'
s=open(p).read()
a=s.index('| case | what it checks |')
b=s.index('\n\n',a)
s=s[:a]+"\n".join(rows)+s[b:]
n=len(rows)-2
s=re.sub(r'\n\d+ cases\. uroce: the af_packet port', f'\n{n} cases. uroce: the af_packet port', s)
open(p,'w').write(s)
