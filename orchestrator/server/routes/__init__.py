"""The service's HTTP routes, one router per resource; `server/api.py` assembles them."""
