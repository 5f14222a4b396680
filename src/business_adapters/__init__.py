"""Application-specific adapters (capability providers, tool packs); they implement contracts."""
