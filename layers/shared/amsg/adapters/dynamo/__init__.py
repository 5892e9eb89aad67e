"""Single-table DynamoDB adapter (see docs/data-model.md)."""
