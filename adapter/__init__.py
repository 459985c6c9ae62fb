"""The V1 front end: framing, parsing, handlers, server, client and CLI."""
