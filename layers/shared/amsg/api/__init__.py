"""One module per HTTP route: the reference's check order, codes and shapes, on top of the ports."""
