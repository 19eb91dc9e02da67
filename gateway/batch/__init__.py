"""The OpenAI Files and Batches API: batch lines run through the gateway in spare capacity."""
