"""HTTP calls to other parties (model providers, webhooks) that end on time and read a bounded
body (``deadline_http``), and their JSON parsed with a depth bound (``bounded_json``). The model
layer and the hooks both call out through it; it imports nothing of the worker."""
