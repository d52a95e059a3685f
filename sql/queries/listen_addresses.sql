-- The addresses the server listens on (read at its start).
SHOW listen_addresses
