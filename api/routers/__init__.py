"""Thin routers: parse, authorise, call the service layer (raysampler.service), shape the response."""
