"""The API's routers: each validates with the schemas, calls one service method, maps the result."""
