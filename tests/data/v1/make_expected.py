import json, hashlib, sys, loader, numpy as np
out = {}
for name in ["fixed", "docs", "arrays", "interrupted"]:
    uri = f"lmdb:///tmp/golden/{name}"
    with loader.open(uri) as ds:
        m = ds.manifest
        s = ds.scan() if ds.layout.variable_length else ds.read_records(0, m.records)
        cols = [s] if isinstance(s, np.ndarray) else [s.ids, s.created_at, s.offsets, s.text]
        dig = hashlib.sha256(b"".join(np.ascontiguousarray(c).tobytes() for c in cols)).hexdigest()
        out[name] = {"records": m.records, "batches": [b.row() for b in m.batches],
                     "runs": [r.to_dict() for r in m.runs], "garbage": [g.to_dict() for g in m.garbage],
                     "arrays": sorted(m.arrays), "scan_sha256": dig, "generation": m.generation,
                     "dataset_id": m.dataset_id}
json.dump(out, open("/tmp/golden/expected.json", "w"), indent=1)
print({k: (v["records"], v["scan_sha256"][:8]) for k, v in out.items()})
