-- Strikes follow a member's email across orgs: find their memberships by email.
CREATE INDEX members_email ON members (email);
