"""Neural-network ops (front end)."""
