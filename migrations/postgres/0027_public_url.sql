-- The URL clients may reach a node at directly, when its operator names
-- one (`--public-url`): a node that forwards a request names the owner's
-- in its answer, so that clients which can reach the nodes go there.
ALTER TABLE cluster_nodes ADD COLUMN public_url TEXT;
