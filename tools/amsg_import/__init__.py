"""``amsg import``: move a reference (``@rei-standard/amsg-server``) deployment's database into our table.

The reference keeps user data as storage ciphertext under per-user keys derived from the master key, and so do
we, so rows are copied as they are (only chunked client-state values are decrypted and re-encrypted as one
value). See the README's migration section for the operator's steps.
"""
