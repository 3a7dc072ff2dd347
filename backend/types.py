"""Column types shared by the domains."""

from sqlalchemy import BigInteger, Integer

# BIGINT on servers; SQLite only autoincrements an INTEGER PRIMARY KEY.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")
