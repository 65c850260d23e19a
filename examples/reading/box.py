import os

import loader

os.makedirs("data", exist_ok=True)

loader.load("gen://scidb96?n=100000", "lmdb://data/g", shards=1, workers=1, progress="none", replace=True)
loader.finalize("lmdb://data/g", dims="i0:10,i1:10000", progress="none")
with loader.open("lmdb://data/g") as ds:
    cells = ds.scan(box={"i0": (2, 5), "i1": (0, 1000)}, array="grid", columns=["i0", "i1", "d1"]).read_all()
    same = ds.scan(box="i0=2:5,i1=0:1000", columns="i0,i1,d1").read_all()
    print(cells.num_rows, cells.equals(same))
