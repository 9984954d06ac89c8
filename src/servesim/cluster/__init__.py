"""Workers, routers and the fleet they form."""
