"""TPC-H queries the benchmarks share (Spark SQL and DuckDB both run this text)."""

from __future__ import annotations

#: By query name: the TPC-H query texts (1.0), with `count(*)` for a plain scan.
TPCH_QUERIES = {
    "Q1": """
        select l_returnflag, l_linestatus, sum(l_quantity) as sum_qty,
               sum(l_extendedprice) as sum_base_price,
               sum(l_extendedprice * (1 - l_discount)) as sum_disc_price,
               sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) as sum_charge,
               avg(l_quantity) as avg_qty, avg(l_extendedprice) as avg_price,
               avg(l_discount) as avg_disc, count(*) as count_order
        from lineitem where l_shipdate <= date '1998-12-01' - interval '90' day
        group by l_returnflag, l_linestatus order by l_returnflag, l_linestatus""",
    "Q3": """
        select l_orderkey, sum(l_extendedprice * (1 - l_discount)) as revenue, o_orderdate,
               o_shippriority
        from customer, orders, lineitem
        where c_mktsegment = 'BUILDING' and c_custkey = o_custkey and l_orderkey = o_orderkey
          and o_orderdate < date '1995-03-15' and l_shipdate > date '1995-03-15'
        group by l_orderkey, o_orderdate, o_shippriority
        order by revenue desc, o_orderdate, l_orderkey limit 10""",
    "Q4": """
        select o_orderpriority, count(*) as order_count from orders
        where o_orderdate >= date '1993-07-01' and o_orderdate < date '1993-10-01'
          and exists (select * from lineitem where l_orderkey = o_orderkey
                      and l_commitdate < l_receiptdate)
        group by o_orderpriority order by o_orderpriority""",
    "Q6": """
        select sum(l_extendedprice * l_discount) as revenue from lineitem
        where l_shipdate >= date '1994-01-01' and l_shipdate < date '1995-01-01'
          and l_discount between 0.05 and 0.07 and l_quantity < 24""",
    "Q12": """
        select l_shipmode,
               sum(case when o_orderpriority = '1-URGENT' or o_orderpriority = '2-HIGH'
                        then 1 else 0 end) as high_line_count,
               sum(case when o_orderpriority <> '1-URGENT' and o_orderpriority <> '2-HIGH'
                        then 1 else 0 end) as low_line_count
        from orders, lineitem
        where o_orderkey = l_orderkey and l_shipmode in ('MAIL', 'SHIP')
          and l_commitdate < l_receiptdate and l_shipdate < l_commitdate
          and l_receiptdate >= date '1994-01-01' and l_receiptdate < date '1995-01-01'
        group by l_shipmode order by l_shipmode""",
    "count(*)": "select count(*) from lineitem",
}
#: 0.1 % of the orders (and their line items) are deleted: order keys whose remainder is this.
DELETED_EVERY, DELETED_REMAINDER = 1000, 7
