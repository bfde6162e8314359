-- The advisor's acknowledged findings (issue 35, must-have 2): someone read a finding and said
-- why it may stay. One row per finding's subject, so acknowledging again replaces the reason,
-- and the fingerprint of the evidence that was read: when the evidence changes, the finding's
-- fingerprint no longer matches and it comes back as open (`advisor::acknowledge`).
create table advisor_acknowledgements (
    broker      text    not null,
    rule        text    not null,       -- the rule's stable id (`quorum-without-dlx`)
    vhost       text    not null,
    subject     text    not null,       -- the queue, or the connection for a finding without one
    fingerprint text    not null,       -- of the evidence as acknowledged
    reason      text    not null,
    actor       text    not null,
    at          integer not null,       -- unix seconds
    primary key (broker, rule, vhost, subject)
);
