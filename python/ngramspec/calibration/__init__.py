"""What the engine measures before and while it speculates.

``invariance`` certifies which verify batch sizes are bit-exact with one-token
decoding; ``cost_timing`` times what a batch costs and ``cost_curve`` judges that
curve; ``invariance_cache`` keeps both on disk; ``verify_plan`` turns them into the
sizes an engine may use; ``audit`` re-checks passes online.
"""
