# Layout 'docs': variable-length keyed records (documents). Shipped with bulkload; stable.
#
# One stored value per document, keyed by its id (8-byte big-endian). The id is
# repeated in the value so that a value read on its own is self-describing.
# loader/docs.py writes this message by framing (see its docstring for the bytes).
@0x80b1783ab272a4c9;

struct Doc {
  id @0 :UInt64;
  createdAt @1 :Int64;   # seconds since the Unix epoch
  text @2 :Text;         # UTF-8
}
