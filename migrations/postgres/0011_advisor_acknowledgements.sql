-- The advisor's acknowledged findings; see migrations/sqlite/0032.
create table advisor_acknowledgements (
    broker      text   not null,
    rule        text   not null,
    vhost       text   not null,
    subject     text   not null,
    fingerprint text   not null,
    reason      text   not null,
    actor       text   not null,
    at          bigint not null,
    primary key (broker, rule, vhost, subject)
);
