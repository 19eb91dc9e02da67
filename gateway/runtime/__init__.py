"""What runs beside the requests: background loops, reload, shared admission, the admin view."""
