"""The multi-tenant line (docs/tenancy.md): tokens, tenants' master keys, authentication at the edge."""
