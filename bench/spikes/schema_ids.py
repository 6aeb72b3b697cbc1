"""Spike (issue 24 design): Parquet field ids through pyarrow, projection by id, exact widenings.

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python bench/spikes/schema_ids.py
Facts it prints are quoted in design/schema-evolution.md.
"""

from __future__ import annotations

import io
import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

FID = b"PARQUET:field_id"


def f(name: str, typ: pa.DataType, fid: int, nullable: bool = True) -> pa.Field:
    return pa.field(name, typ, nullable, metadata={FID: str(fid).encode()})


def fid(field: pa.Field) -> int | None:
    meta = field.metadata or {}
    return int(meta[FID]) if FID in meta else None


# -- 1. nested field ids: written and read back -------------------------------------------------
v1 = pa.schema([
    f("id", pa.int64(), 1, False),
    f("name", pa.string(), 2),
    f("amt", pa.int32(), 3),
    f("addr", pa.struct([f("city", pa.string(), 5), f("zip", pa.string(), 6)]), 4),
    f("tags", pa.list_(f("element", pa.string(), 8)), 7),
])
rows = 100_000
data = pa.table({
    "id": pa.array(range(rows), pa.int64()),
    "name": pa.array([f"n{i}" for i in range(rows)]),
    "amt": pa.array([i % 1000 for i in range(rows)], pa.int32()),
    "addr": pa.array([{"city": "c", "zip": str(i)} for i in range(rows)]),
    "tags": pa.array([["a", "b"]] * rows),
}).cast(v1)
buf = io.BytesIO()
pq.write_table(data, buf)
old_file = buf.getvalue()
back = pq.read_schema(io.BytesIO(old_file))
print("1. ids read back:", [(x.name, fid(x)) for x in back],
      "addr children:", [(c.name, fid(c)) for c in back.field("addr").type],
      "tags element:", fid(back.field("tags").type.value_field))
print("   parquet schema:", str(pq.ParquetFile(io.BytesIO(old_file)).schema).count("field_id"),
      "field_id annotations in the Parquet schema")

# -- 2. the schema after: rename name->full_name, drop amt, re-add amt (new id 9, int64),
#       add addr.country (id 10), widen nothing else ------------------------------------------
v2 = pa.schema([
    f("id", pa.int64(), 1, False),
    f("full_name", pa.string(), 2),
    f("addr", pa.struct([f("city", pa.string(), 5), f("zip", pa.string(), 6),
                         f("country", pa.string(), 10)]), 4),
    f("tags", pa.list_(f("element", pa.string(), 8)), 7),
    f("amt", pa.int64(), 9),
])


def project_type(file_field: pa.Field | None, want: pa.Field, column: pa.Array | None,
                 length: int) -> pa.Array:
    """``column`` (the file's field with the same id, or None) as ``want``: children by id."""
    if column is None:
        return pa.nulls(length, want.type)
    if pa.types.is_struct(want.type):
        assert file_field is not None
        by_id = {fid(c): (i, c) for i, c in enumerate(file_field.type)}
        children = []
        for child in want.type:
            hit = by_id.get(fid(child))
            sub = pc.struct_field(column, hit[0]) if hit else None
            children.append(project_type(hit[1] if hit else None, child, sub, length))
        return pa.StructArray.from_arrays(children, fields=list(want.type),
                                          mask=column.is_null() if column.null_count else None)
    if column.type != want.type:
        return column.cast(want.type)  # a widening the schema change admitted (exact)
    return column


def read_by_id(source: bytes, schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    pf = pq.ParquetFile(io.BytesIO(source))
    file_schema = pf.schema_arrow
    by_id = {fid(x): x for x in file_schema}
    wanted = [schema.field(c) for c in columns] if columns else list(schema)
    present = [by_id[fid(w)].name for w in wanted if fid(w) in by_id]
    table = pf.read(columns=present)  # column pruning by the file's own names
    out = []
    for w in wanted:
        hit = by_id.get(fid(w))
        col = table.column(hit.name).combine_chunks() if hit is not None else None
        out.append(project_type(hit, w, col, table.num_rows))
    return pa.Table.from_arrays(out, schema=pa.schema(wanted))


got = read_by_id(old_file, v2)
print("2. projected:", got.schema.names, "| full_name[0]:", got.column("full_name")[0],
      "| re-added amt nulls:", got.column("amt").null_count, "of", got.num_rows,
      "| addr[0]:", got.column("addr")[0])
assert got.column("amt").null_count == rows  # the dropped amt's values are not resurrected
assert got.column("full_name")[0].as_py() == "n0"

# by name, the same read would resurrect the old amt: the reason ids exist
by_name = pq.read_table(io.BytesIO(old_file), columns=["amt"])
print("   by name the re-added amt would read", by_name.column("amt")[1], "(old data)")

# -- 3. per-file cost of projecting by id against a plain read ---------------------------------
def timed(fn, n=30):
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1000


plain = timed(lambda: pq.read_table(io.BytesIO(old_file)))
ided = timed(lambda: read_by_id(old_file, v2))
print(f"3. {rows} rows, 5 columns: plain read {plain:.2f} ms, by id {ided:.2f} ms, "
      f"overhead {ided - plain:.2f} ms/file")
buf2 = io.BytesIO()
pq.write_table(data.slice(0, 1000), buf2)
small = buf2.getvalue()
plain_s = timed(lambda: pq.read_table(io.BytesIO(small)), 200)
ided_s = timed(lambda: read_by_id(small, v2), 200)
print(f"   1000 rows: plain {plain_s:.3f} ms, by id {ided_s:.3f} ms")
# schema-only projection decision (no data): what a planner pays per file with a cached footer
fs = pq.ParquetFile(io.BytesIO(old_file)).schema_arrow
plan = timed(lambda: {fid(x): x.name for x in fs}, 2000)
print(f"   id->name map from a footer schema: {plan * 1000:.1f} us")

# -- 4. dataset scans keep field ids? (the FileReader uses pyarrow.dataset) ---------------------
import pyarrow.dataset as ds  # noqa: E402

pq.write_table(data.slice(0, 10), "/tmp/_spike_ids.parquet")
dsch = ds.dataset("/tmp/_spike_ids.parquet").schema
print("4. dataset schema keeps ids:", [(x.name, fid(x)) for x in dsch][:3])

# -- 5. widenings: which casts are exact (safe=True refuses loss) -------------------------------
cases = [
    (pa.array([-128, 127], pa.int8()), pa.int16()),
    (pa.array([-2**15, 2**15 - 1], pa.int16()), pa.int32()),
    (pa.array([-2**31, 2**31 - 1], pa.int32()), pa.int64()),
    (pa.array([1.1, 3.4e38], pa.float32()), pa.float64()),
    (pa.array([2**24 + 1, 2**31 - 1], pa.int32()), pa.float64()),
    (pa.array([2**53 + 1], pa.int64()), pa.float64()),
    (pa.array(["123.45"]).cast(pa.decimal128(5, 2)), pa.decimal128(10, 2)),
    (pa.array(["123.45"]).cast(pa.decimal128(5, 2)), pa.decimal128(10, 3)),
    (pa.array([0, 19000], pa.date32()), pa.timestamp("us")),
    (pa.array([0, 19000], pa.date32()), pa.timestamp("us", tz="UTC")),
    (pa.array([-10**6, 2932896], pa.date32()), pa.timestamp("ns")),
    (pa.array([1], pa.timestamp("ms")), pa.timestamp("us")),
    (pa.array([1], pa.uint32()), pa.int64()),
    (pa.array(["x"], pa.string()), pa.large_string()),
]
for arr, to in cases:
    try:
        out = arr.cast(to, safe=True)
        back_ok = out.cast(arr.type, safe=True).equals(arr)
        print(f"5. {arr.type} -> {to}: ok, round-trips: {back_ok}")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        print(f"5. {arr.type} -> {to}: refused ({type(exc).__name__}: {str(exc)[:70]})")

# -- 6. Arrow IPC (metadata-table blocks) keeps field metadata on struct children --------------
sink = pa.BufferOutputStream()
with pa.ipc.new_file(sink, v2) as w:
    w.write_table(v2.empty_table())
rs = pa.ipc.open_file(sink.getvalue()).schema
print("6. IPC keeps nested ids:", [(c.name, fid(c)) for c in rs.field("addr").type])
print("   schema.serialize() keeps them:",
      fid(pa.ipc.read_schema(pa.py_buffer(v2.serialize().to_pybytes())).field("addr").type[2]))

# -- 7. the build's way: one projection per schema version, pushed into a pyarrow dataset scan -
#       (renames, casts, nulls and nested children as expressions; the filter rewritten to the
#       version's names), against the plain scan of the same file
path7 = "/tmp/_spike_ids_big.parquet"
pq.write_table(data, path7)
v1_names = pq.read_schema(path7)
projection = {
    "id": pc.field("id"),
    "full_name": pc.field("name"),
    "addr": pc.Expression._call("make_struct", [
        pc.field(("addr", "city")), pc.field(("addr", "zip")),
        pc.scalar(None).cast(pa.string())], pc.MakeStructOptions(["city", "zip", "country"])),
    "tags": pc.field("tags"),
    "amt": pc.scalar(None).cast(pa.int64()),
}
filt_v2 = pc.field("full_name") == "n5"
filt_v1 = pc.Expression._call("equal", [pc.field("name"), pc.scalar("n5")])  # rewritten by name map
dset = ds.dataset(path7, schema=v1_names)
got7 = dset.to_table(columns=projection, filter=filt_v1)
print("7. dataset projection:", got7.schema, got7.to_pylist())
full7 = dset.to_table(columns=projection)
assert full7.column("amt").null_count == rows
plain7 = timed(lambda: ds.dataset(path7, schema=v1_names).to_table())
proj7 = timed(lambda: ds.dataset(path7, schema=v1_names).to_table(columns=projection))
print(f"   {rows} rows: plain dataset scan {plain7:.2f} ms, projected scan {proj7:.2f} ms")
