"""``adapter console``: a web console of the deployment, its own process reading the
deployment's Redis as the command lines do (docs/console.md).

app.py builds the Starlette application; one module per page family (deployment, topics,
messages, groups, transactions, security) holds thin handlers over the read views and write
paths of ``mapping.operations`` and the pod's parts; web.py is what they share (templates,
login, authorization, forms, errors); sampler.py samples rates and lags in the background.
"""
