"""One parser per public benchmark source; each returns a ParseResult in the measurement schema."""
