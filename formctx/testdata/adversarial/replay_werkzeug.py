# Replays this corpus through werkzeug (Debian python3-werkzeug):
#   python3 formctx/testdata/adversarial/replay_werkzeug.py formctx/testdata/adversarial
# It prints what werkzeug reads from each body and counts accepted bodies
# where werkzeug reads another context (must be 0).
import glob, io, os, sys
from werkzeug.formparser import parse_form_data
d = sys.argv[1]
bad = 0
for meta in sorted(glob.glob(os.path.join(d, "*.meta"))):
    m = dict(l.split(": ", 1) for l in open(meta, encoding="utf-8").read().splitlines() if ": " in l)
    body = open(meta[:-5] + ".body", "rb").read()
    env = {"REQUEST_METHOD": "POST", "CONTENT_TYPE": m["content-type"], "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body)}
    try:
        _, form, files = parse_form_data(env, silent=False)
        got = {k: form.getlist(k) for k in form if k.lower() == "contextid"}
        fk = [k for k in files if k.lower() == "contextid"]
        res = f"form={got} files={fk}"
        vals = [v for vs in got.values() for v in vs]
        ok = all(v == m["context"] for v in vals) and not fk
    except Exception as e:
        res, ok = f"error {type(e).__name__}: {e}", True
    flag = ""
    if m["expect"] == "accept" and not ok:
        flag = "  <-- DIFFERENTIAL on an accepted body"; bad += 1
    elif m["expect"] != "accept" and not ok:
        flag = "  (refused by keygate; werkzeug would read another context)"
    print(os.path.basename(meta)[:-5], m["expect"], res[:110], flag)
print("accepted-body differentials:", bad)
