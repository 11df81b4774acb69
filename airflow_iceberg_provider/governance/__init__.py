"""The governance ledger stores: reading and writing the provider's governance tables through the catalog hook."""
