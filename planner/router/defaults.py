"""The router's hold-queue defaults, shared with the simulator (which holds its requests the same way)."""

HOLD_QUEUE = 1000  # requests held at once for want of a replica in rotation (`planner route --hold-queue`)
# How long one request is held (`--hold-timeout-s`): above a cold start (start-up of a large model's engine,
# ~120 s, plus the wake) and below the 600 s read timeout of the OpenAI clients.
HOLD_TIMEOUT_S = 300.0
RETRY_AFTER_S = 10  # what a refused request's Retry-After says: the pool is waking, try again soon
WAKE_REPEAT_S = 15.0  # the wake signal is repeated this often while requests wait
