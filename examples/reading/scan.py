import os

import loader

os.makedirs("data", exist_ok=True)

loader.load("gen://scidb96?n=100000", "lmdb://data/x", shards=2, workers=2, progress="none", replace=True)
with loader.open("lmdb://data/x") as ds:
    reader = ds.scan(columns=["i1", "d3"], records=(20000, 30000))  # pyarrow.RecordBatchReader
    for batch in reader:  # a few stored batches in memory at a time
        print(batch.num_rows, batch.schema.names)
        break
    table = ds.to_arrow(columns=["d0"])  # the same, read to one pyarrow.Table
    df = ds.to_pandas(records=(0, 1000))  # needs pandas
    recs = ds.read_records(0, 100)  # numpy structured array of the layout
    print(table.num_rows, len(df), recs["i1"][:3])
