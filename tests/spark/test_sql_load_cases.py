"""CarbonData's loading test cases on partitioned tables, through ``txn.spark.sql``.

Modelled on CarbonData's ``StandardPartitionTableLoadingTestCase``,
``StandardPartitionTableOverwriteTestCase``, ``StandardPartitionTableQueryTestCase`` (timestamp
partition columns) and ``BadRecordActionTest`` / ``BadRecordLoggerTest``: a static
``PARTITION(...)`` value wins over the file's column, timestamp partition columns, INSERT
OVERWRITE that replaces only the partitions it writes, and the bad-records options of LOAD.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

import txn
import txn.spark

pytestmark = pytest.mark.spark

#: CarbonData's ``data.csv``, cut to the columns these tests use (``doj`` is ``dd-MM-yyyy``).
DATA_CSV = """empno,empname,designation,doj,workgroupcategory,deptno,salary
11,arvind,SE,17-01-2007,1,10,5040
12,krithin,SSE,29-05-2008,1,11,7124
13,madhan,TPL,07-07-2009,2,12,9054
14,anandh,SA,29-12-2010,3,13,11248
15,ayushi,SSA,09-11-2011,1,12,13245
16,pramod,SE,14-10-2012,2,10,5040
"""

EMPLOYEE_COLUMNS = ("empname String, designation String, doj Timestamp, workgroupcategory int, "
                    "deptno int, salary int")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=timezone.utc)  # type: ignore[misc]


@pytest.fixture
def data_csv(tmp_path: Path) -> str:
    path = tmp_path / "data.csv"
    path.write_text(DATA_CSV)
    return str(path)


def rows_of(sql: Any, statement: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in sql(statement).collect())


def data_folders(location: Path) -> list[str]:
    """The partition folders holding data files, relative to the table."""
    return sorted({str(p.parent.relative_to(location)) for p in location.rglob("*.parquet")
                   if not str(p.relative_to(location)).startswith(("_metadata", "_timeline"))})


# -- static partition values win over the file's column ----------------------------------------

def test_load_static_partition_one_column(sql: Any, warehouse: Path, data_csv: str) -> None:
    """"data loading for static partition table for one partition column"."""
    sql(f"CREATE TABLE loadstaticpartitionone ({EMPLOYEE_COLUMNS}) PARTITIONED BY (empno int) "
        "STORED AS carbondata")
    sql(f"LOAD DATA LOCAL INPATH '{data_csv}' INTO TABLE loadstaticpartitionone PARTITION(empno='1') "
        "OPTIONS('DELIMITER'=',', 'QUOTECHAR'='\"', 'TIMESTAMPFORMAT'='dd-MM-yyyy')")
    assert rows_of(sql, "SELECT empno, empname FROM loadstaticpartitionone") == [
        (1, "anandh"), (1, "arvind"), (1, "ayushi"), (1, "krithin"), (1, "madhan"), (1, "pramod")]
    assert data_folders(warehouse / "loadstaticpartitionone") == ["empno=1"]


def test_load_static_partition_two_columns(sql: Any, warehouse: Path, data_csv: str) -> None:
    """"data loading for static partition table for two partition column"."""
    sql("CREATE TABLE loadstaticpartitiontwo (empname String, doj Timestamp, workgroupcategory int, "
        "salary int) PARTITIONED BY (empno int, deptno int) STORED AS carbondata")
    sql(f"LOAD DATA LOCAL INPATH '{data_csv}' INTO TABLE loadstaticpartitiontwo "
        "PARTITION(empno='1', deptno='1') OPTIONS('TIMESTAMPFORMAT'='dd-MM-yyyy')")
    assert rows_of(sql, "SELECT DISTINCT empno, deptno FROM loadstaticpartitiontwo") == [(1, 1)]
    assert rows_of(sql, "SELECT count(*) FROM loadstaticpartitiontwo") == [(6,)]


def test_load_static_partition_and_dynamic_column(sql: Any, warehouse: Path, data_csv: str) -> None:
    """"data loading for static partition table for one static partition and one dynamic": the
    static column's value comes from PARTITION, the other from the file."""
    sql("CREATE TABLE loadpartitionmixed (empname String, doj Timestamp, salary int) "
        "PARTITIONED BY (empno int, deptno int) STORED AS carbondata")
    sql(f"LOAD DATA LOCAL INPATH '{data_csv}' INTO TABLE loadpartitionmixed PARTITION(empno='1') "
        "OPTIONS('TIMESTAMPFORMAT'='dd-MM-yyyy')")
    assert rows_of(sql, "SELECT empno, deptno, count(*) FROM loadpartitionmixed GROUP BY empno, deptno") \
        == [(1, 10, 2), (1, 11, 1), (1, 12, 2), (1, 13, 1)]


def test_load_overwrite_static_partition(sql: Any, warehouse: Path, data_csv: str) -> None:
    """"overwriting static partition table for one partition column": LOAD ... OVERWRITE into
    PARTITION(empno='1') replaces that partition and leaves empno=2 alone."""
    sql(f"CREATE TABLE loadstaticpartitiononeoverwrite ({EMPLOYEE_COLUMNS}) PARTITIONED BY (empno int) "
        "STORED AS carbondata")
    for value in ("1", "1", "2"):
        sql(f"LOAD DATA LOCAL INPATH '{data_csv}' INTO TABLE loadstaticpartitiononeoverwrite "
            f"PARTITION(empno='{value}') OPTIONS('TIMESTAMPFORMAT'='dd-MM-yyyy')")
    sql(f"LOAD DATA LOCAL INPATH '{data_csv}' OVERWRITE INTO TABLE loadstaticpartitiononeoverwrite "
        "PARTITION(empno='1') OPTIONS('TIMESTAMPFORMAT'='dd-MM-yyyy')")
    assert rows_of(sql, "SELECT empno, count(*) FROM loadstaticpartitiononeoverwrite GROUP BY empno") \
        == [(1, 6), (2, 6)]


# -- timestamp partition columns ---------------------------------------------------------------

def test_timestamp_partition_column_load_prune_and_folders(sql: Any, warehouse: Path,
                                                           data_csv: str) -> None:
    """"data loading for partition table for timestamp column" and its queries: folders named as
    Spark names them (``:`` escaped), values that read back exactly, a filter on the column."""
    sql("CREATE TABLE partitiontimestamp (empno int, empname String, salary int) "
        "PARTITIONED BY (doj Timestamp) STORED AS carbondata")
    sql(f"LOAD DATA LOCAL INPATH '{data_csv}' INTO TABLE partitiontimestamp "
        "OPTIONS('TIMESTAMPFORMAT'='dd-MM-yyyy')")
    sql("INSERT INTO partitiontimestamp VALUES (20, 'late', 1, timestamp'2012-10-14 10:30:15.25')")
    location = warehouse / "partitiontimestamp"
    assert "doj=2012-10-14 10%3A30%3A15.25" in data_folders(location)
    assert "doj=2007-01-17 00%3A00%3A00" in data_folders(location)
    exact = "SELECT empno FROM partitiontimestamp WHERE doj = timestamp'2012-10-14 10:30:15.25'"
    assert rows_of(sql, exact) == [(20,)]
    assert rows_of(sql, "SELECT empno FROM partitiontimestamp WHERE doj >= timestamp'2011-01-01'") \
        == [(15,), (16,), (20,)]
    table = txn.open_table(str(location))
    snapshot = table.snapshot()
    pruned = snapshot.files(filter=pc.field("doj") == utc(2012, 10, 14, 10, 30, 15, 250000))
    assert [f.rows for f in pruned] == [1]
    assert rows_of(sql, "SHOW PARTITIONS partitiontimestamp")[-1] == ("doj=2012-10-14 10%3A30%3A15.25",)


def test_timestamp_and_date_partition_columns_together(sql: Any, warehouse: Path) -> None:
    """"data loading for partition table for date and timestamp column"."""
    sql("CREATE TABLE partitiondatets (id int, v string) PARTITIONED BY (d date, ts timestamp) "
        "STORED AS carbondata")
    sql("INSERT INTO partitiondatets VALUES (1, 'a', date'2020-02-29', timestamp'2020-02-29 23:59:59'), "
        "(2, 'b', date'2020-03-01', timestamp'2020-03-01 00:00:00.000001')")
    assert rows_of(sql, "SELECT id, d, ts FROM partitiondatets WHERE ts > timestamp'2020-03-01 00:00:00'") \
        == [(2, datetime(2020, 3, 1).date(), datetime(2020, 3, 1, 0, 0, 0, 1))]
    assert data_folders(warehouse / "partitiondatets") == [
        "d=2020-02-29/ts=2020-02-29 23%3A59%3A59", "d=2020-03-01/ts=2020-03-01 00%3A00%3A00.000001"]


# -- INSERT OVERWRITE replaces the partitions it writes ----------------------------------------

def overwrite_table(sql: Any) -> None:
    sql("CREATE TABLE insertoverwrite (id int, name string) PARTITIONED BY (dept string) "
        "STORED AS carbondata")
    sql("INSERT INTO insertoverwrite VALUES (1, 'a', 'x'), (2, 'b', 'y'), (3, 'c', 'z')")


def test_insert_overwrite_replaces_only_the_partitions_in_the_data(sql: Any) -> None:
    """"insert overwrite into partition table": CarbonData (Spark's dynamic partition overwrite)
    replaces the partitions the query writes and keeps the others."""
    overwrite_table(sql)
    sql("INSERT OVERWRITE TABLE insertoverwrite SELECT 10, 'new', 'y' UNION ALL SELECT 11, 'w', 'w'")
    assert rows_of(sql, "SELECT id, name, dept FROM insertoverwrite") == [
        (1, "a", "x"), (3, "c", "z"), (10, "new", "y"), (11, "w", "w")]


def test_insert_overwrite_static_partition(sql: Any) -> None:
    """"insert overwrite static partition": PARTITION(dept='y') replaces that partition only,
    also with a query of no rows (it empties the partition)."""
    overwrite_table(sql)
    sql("INSERT OVERWRITE TABLE insertoverwrite PARTITION(dept='y') SELECT 20, 'p'")
    assert rows_of(sql, "SELECT id, dept FROM insertoverwrite") == [(1, "x"), (3, "z"), (20, "y")]
    sql("INSERT OVERWRITE TABLE insertoverwrite PARTITION(dept='z') SELECT 1, 'n' WHERE false")
    assert rows_of(sql, "SELECT id, dept FROM insertoverwrite") == [(1, "x"), (20, "y")]
    sql("INSERT INTO insertoverwrite PARTITION(dept='q') VALUES (30, 'i')")
    assert rows_of(sql, "SELECT id, dept FROM insertoverwrite") == [(1, "x"), (20, "y"), (30, "q")]


def test_insert_overwrite_of_an_unpartitioned_table_replaces_it(sql: Any) -> None:
    sql("CREATE TABLE plainoverwrite (id int, name string) STORED AS carbondata")
    sql("INSERT INTO plainoverwrite VALUES (1, 'a'), (2, 'b')")
    sql("INSERT OVERWRITE TABLE plainoverwrite VALUES (3, 'c')")
    assert rows_of(sql, "SELECT id FROM plainoverwrite") == [(3,)]


# -- bad records and extra file columns --------------------------------------------------------

BAD_CSV = """empno,empname,salary,comment
1,a,100,first
2,b,lots,second
3,c,300,third
4,d,1e99,fourth
"""


@pytest.fixture
def bad_csv(tmp_path: Path) -> str:
    path = tmp_path / "bad.csv"
    path.write_text(BAD_CSV)
    return str(path)


def test_load_ignores_file_columns_the_table_lacks(sql: Any, tmp_path: Path) -> None:
    """CarbonData maps the file's columns by name and ignores those the table does not have,
    from the file's header line or from FILEHEADER."""
    sql("CREATE TABLE extracolumns (empno int, empname string) STORED AS carbondata")
    headerless = tmp_path / "headerless.csv"
    headerless.write_text("5,e,500,x\n")
    sql(f"LOAD DATA INPATH '{headerless}' INTO TABLE extracolumns "
        "OPTIONS('FILEHEADER'='empno,empname,salary,comment')")
    with_header = tmp_path / "with_header.csv"
    with_header.write_text("comment,empname,empno\nhi,f,6\n")
    sql(f"LOAD DATA INPATH '{with_header}' INTO TABLE extracolumns")
    assert rows_of(sql, "SELECT * FROM extracolumns") == [(5, "e"), (6, "f")]


def test_bad_records_force_ignore_and_fail(sql: Any, warehouse: Path, bad_csv: str) -> None:
    """BadRecordActionTest: FORCE loads the bad value as null, IGNORE drops its row, FAIL loads
    nothing and names the first bad record; BAD_RECORDS_LOGGER_ENABLE is accepted."""
    sql("CREATE TABLE badrecords (empno int, empname string, salary int) STORED AS carbondata")
    sql(f"LOAD DATA INPATH '{bad_csv}' INTO TABLE badrecords OPTIONS('BAD_RECORDS_ACTION'='FORCE', "
        "'BAD_RECORDS_LOGGER_ENABLE'='false')")
    assert rows_of(sql, "SELECT empno, salary FROM badrecords") == [
        (1, 100), (2, None), (3, 300), (4, None)]
    sql(f"LOAD DATA INPATH '{bad_csv}' OVERWRITE INTO TABLE badrecords "
        "OPTIONS('BAD_RECORDS_ACTION'='IGNORE', 'BAD_RECORDS_LOGGER_ENABLE'='true')")
    assert rows_of(sql, "SELECT empno, salary FROM badrecords") == [(1, 100), (3, 300)]
    table = txn.open_table(str(warehouse / "badrecords"))
    before = table.timeline()
    with pytest.raises(txn.SchemaMismatchError) as caught:
        sql(f"LOAD DATA INPATH '{bad_csv}' INTO TABLE badrecords OPTIONS('BAD_RECORDS_ACTION'='FAIL')")
    assert "'lots'" in str(caught.value) and "'salary'" in str(caught.value)
    assert table.timeline() == before


def test_bad_records_redirect_writes_them_under_the_bad_record_path(sql: Any, tmp_path: Path,
                                                                   bad_csv: str) -> None:
    """BadRecordLoggerTest: REDIRECT loads the good rows and writes the bad ones, as the file
    held them, to a CSV under BAD_RECORD_PATH; REDIRECT without a path is refused."""
    sql("CREATE TABLE redirected (empno int, empname string, salary int) STORED AS carbondata")
    bad_path = tmp_path / "badrecords"
    sql(f"LOAD DATA INPATH '{bad_csv}' INTO TABLE redirected OPTIONS('BAD_RECORDS_ACTION'='REDIRECT', "
        f"'BAD_RECORD_PATH'='{bad_path}', 'BAD_RECORDS_LOGGER_ENABLE'='true')")
    assert rows_of(sql, "SELECT empno, salary FROM redirected") == [(1, 100), (3, 300)]
    written = sorted(bad_path.rglob("*.csv"))
    assert len(written) == 1
    lines = written[0].read_text().splitlines()
    assert lines == ["empno,empname,salary,comment", "2,b,lots,second", "4,d,1e99,fourth"]
    logs = sorted(bad_path.rglob("*.log"))
    assert len(logs) == 1 and "'lots'" in logs[0].read_text()
    with pytest.raises(txn.InvalidOptionError) as caught:
        sql(f"LOAD DATA INPATH '{bad_csv}' INTO TABLE redirected OPTIONS('BAD_RECORDS_ACTION'='REDIRECT')")
    assert "BAD_RECORD_PATH" in str(caught.value)
    with pytest.raises(txn.InvalidOptionError) as caught:
        sql(f"LOAD DATA INPATH '{bad_csv}' INTO TABLE redirected OPTIONS('IS_EMPTY_DATA_BAD_RECORD'='true')")
    assert "IS_EMPTY_DATA_BAD_RECORD" in str(caught.value).upper()
