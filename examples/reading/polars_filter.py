import os

import polars as pl

import loader

os.makedirs("data", exist_ok=True)

loader.load("gen://scidb96?n=100000", "lmdb://data/p", shards=2, workers=2, progress="none", replace=True)
with loader.open("lmdb://data/p") as ds:
    lf = ds.to_polars(record_column="record")  # polars.LazyFrame (pip install 'bulkload[polars]')
    total = (
        lf.filter((pl.col("record") >= 20000) & (pl.col("record") < 21000) & (pl.col("d0") > 100))
        .select(pl.col("d3").sum())
        .collect()
    )  # reads only the batches of records 20000..20999
    print(total.item())
    print(lf.select("i1", "d2").head(3).collect())  # decodes i1 and d2 only, stops after 3 rows
