"""Documents: the JSON shapes that iotape's parts hand to each other and to their users."""
