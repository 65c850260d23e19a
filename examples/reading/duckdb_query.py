import os

import duckdb

import loader

os.makedirs("data", exist_ok=True)

loader.load("gen://scidb96?n=100000", "lmdb://data/d", shards=2, workers=2, progress="none", replace=True)
with loader.open("lmdb://data/d") as ds:
    rd = ds.scan(columns=["i0", "d1"])  # DuckDB reads the RecordBatchReader by its name
    print(duckdb.sql("SELECT i0, count(*) AS n, avg(d1) AS mean FROM rd GROUP BY i0 ORDER BY i0 LIMIT 3").fetchall())
    print(ds.sql("SELECT max(i1) AS m FROM data"))  # the same through bulkload: the table is `data`
