"""`arthex serve --protocol art`: ART's remote-backend API (`art run`'s routes and shapes, as
ART 0.5.17 and NVIDIA NeMo Agent Toolkit's `RemoteBackend` call them) over any arthex backend
that trains, with the OpenAI-compatible inference server on a port of its own.

- wire.py: the request bodies, parsed and checked (model JSON, configs, groups);
- sampled_ids.py: token ids for Choices that carry only `token_id:N` logprobs (NAT's);
- service.py: what each route does (registering, steps, training jobs that outlive their
  stream, checkpoint deletion);
- app.py: the two ASGI apps (the ART API; the inference proxy) behind the server's guard;
- main.py: both servers in one process, until SIGINT/SIGTERM.
"""
